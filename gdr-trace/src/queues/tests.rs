use super::*;
use crate::{
    events::{
        purpose::{Purpose, Verb},
        Context,
    },
    mr::correlate::{Registration, Release},
};

fn ctx(pid: u32) -> Context {
    Context { pid, tid: pid, comm: "ibgda".into(), ..Default::default() }
}

fn pin(purpose: Purpose, sources: &[&str]) -> Registration {
    Registration {
        ctx: ctx(7),
        length: 4096,
        purpose,
        sources: sources.iter().map(|s| Source::parse(s)).collect(),
        kernel_pinned: true,
        umem: Some(0xffff_0001),
        ..Default::default()
    }
}

#[test]
fn the_verb_tells_a_registration_from_queue_memory() {
    let verb = |v| Purpose { verb: Some(v), doorbell: false };
    let k = ["kprobe:ib_umem_get"];
    assert_eq!(pin_use(&pin(verb(Verb::Register), &k)), PinUse::Registration);
    assert_eq!(pin_use(&pin(verb(Verb::CreateCq), &k)), PinUse::Queue(QueueKind::Cq));
    assert_eq!(pin_use(&pin(verb(Verb::CreateQp), &k)), PinUse::Queue(QueueKind::Qp));
    assert_eq!(pin_use(&pin(verb(Verb::CreateSrq), &k)), PinUse::Queue(QueueKind::Srq));
    assert_eq!(pin_use(&pin(verb(Verb::CreateWq), &k)), PinUse::Queue(QueueKind::Wq));
    assert_eq!(pin_use(&pin(verb(Verb::DevxUmemReg), &k)), PinUse::Queue(QueueKind::DevxUmem));
    // The doorbell page pinned inside a QP's creation is the doorbell's, not the QP ring's.
    let db = Purpose { verb: Some(Verb::CreateQp), doorbell: true };
    assert_eq!(pin_use(&pin(db, &k)), PinUse::Queue(QueueKind::Doorbell));
}

#[test]
fn a_kernel_pin_in_no_verb_is_never_taken_for_a_registration() {
    let none = Purpose::default();
    assert_eq!(pin_use(&pin(none, &["fexit:ib_umem_get"])), PinUse::Queue(QueueKind::Unknown));
    // libibverbs' registration call joined it: that call is the verb.
    assert_eq!(pin_use(&pin(none, &["fexit:ib_umem_get", "uprobe:ibv_reg_mr"])), PinUse::Registration);
    // Only userspace saw it (no kernel hook here): a registration, as the call says.
    assert_eq!(pin_use(&pin(none, &["uprobe:ibv_reg_mr"])), PinUse::Registration);
    // The OFED peer path in no verb is no registration either.
    assert_eq!(pin_use(&pin(none, &["kprobe:ib_umem_get_peer"])), PinUse::Queue(QueueKind::Unknown));
}

fn queue_pin(kind: QueueKind, memory: Verdict, umem: u64, length: u64) -> QueuePin {
    let mut r = pin(Purpose::default(), &["kprobe:ib_umem_get"]);
    r.umem = Some(umem);
    r.length = length;
    QueuePin::of(&r, kind, memory)
}

fn iomem(ret: i64) -> crate::events::cuda::CudaCall {
    crate::events::cuda::CudaCall {
        ctx: ctx(7),
        op: crate::events::cuda::CudaOp::HostRegister,
        function: "cuMemHostRegister".into(),
        source: Source::parse("uprobe:cuMemHostRegister"),
        addr: 0x7f00_0000_0000,
        length: 4096,
        flags: 0x07,
        aux: 0,
        ret,
        device: None,
        peer_device: None,
        handle: None,
        file: None,
    }
}

#[test]
fn tallies_live_pins_by_kind_and_memory_until_released() {
    let mut q = Queues::new(true);
    q.pinned(&queue_pin(QueueKind::Cq, Verdict::Host, 1, 65536));
    q.pinned(&queue_pin(QueueKind::Doorbell, Verdict::Host, 2, 4096));
    q.pinned(&queue_pin(QueueKind::Qp, Verdict::GpuPeermem, 3, 131072));
    let rel = Release { ctx: ctx(7), umem: Some(1), ..Default::default() };
    let r = q.released(&rel).expect("the CQ ring's release");
    assert_eq!((r.kind, r.memory, r.length, r.owner), (QueueKind::Cq, Verdict::Host, 65536, 7));
    // Not a queue pin: a registration's release is not the family's.
    assert!(q.released(&Release { umem: Some(99), ..Default::default() }).is_none());
    let rep = q.report();
    let p = &rep.procs[0].queues;
    assert_eq!(
        p.tallies[&(QueueKind::Cq, Verdict::Host)],
        Tally { pins: 1, bytes: 65536, live: 0, live_bytes: 0 }
    );
    assert_eq!(p.live_bytes(), 4096 + 131072);
    assert_eq!(p.queue_pins(), 3);
}

#[test]
fn names_gpu_initiated_networking_by_queue_memory_and_the_doorbell_mapping() {
    let gpu_queues = |q: &mut Queues| {
        q.pinned(&queue_pin(QueueKind::DevxUmem, Verdict::GpuDmabuf, 1, 1 << 20));
        q.pinned(&queue_pin(QueueKind::Cq, Verdict::Host, 2, 4096));
    };
    let mode = |q: &Queues| q.report().procs[0].gin.as_ref().map(|g| g.mode);

    let mut handled = Queues::new(true);
    gpu_queues(&mut handled);
    handled.cuda(&iomem(0));
    assert_eq!(mode(&handled), Some(gin::GinMode::GpuHandled));

    let mut failed = Queues::new(true);
    gpu_queues(&mut failed);
    failed.cuda(&iomem(800));
    assert_eq!(mode(&failed), Some(gin::GinMode::CpuAssisted));
    let ev = failed.report().procs[0].gin.clone().unwrap().evidence.join("; ");
    assert!(ev.contains("CUresult 800") && ev.contains("devx-umem in gpu-dmabuf"), "{ev}");

    let mut unmapped = Queues::new(true);
    gpu_queues(&mut unmapped);
    assert_eq!(mode(&unmapped), Some(gin::GinMode::CpuAssisted));
    // Where the mapping cannot be seen, the evidence says so.
    let mut blind = Queues::new(false);
    gpu_queues(&mut blind);
    let ev = blind.report().procs[0].gin.clone().unwrap().evidence.join("; ");
    assert!(ev.contains("cannot be seen"), "{ev}");

    let mut host = Queues::new(true);
    host.pinned(&queue_pin(QueueKind::Qp, Verdict::Host, 1, 4096));
    host.cuda(&iomem(0));
    assert_eq!(mode(&host), Some(gin::GinMode::HostQueues));

    // A mapping of plain host memory (no IOMEMORY flag) says nothing of doorbells.
    let mut plain = Queues::new(true);
    gpu_queues(&mut plain);
    let mut c = iomem(0);
    c.flags = 0x01;
    plain.cuda(&c);
    assert_eq!(mode(&plain), Some(gin::GinMode::CpuAssisted));
    // No queue memory: nothing to say.
    let mut none = Queues::new(true);
    none.cuda(&iomem(0));
    assert_eq!(none.report().procs[0].gin, None);
}

#[test]
fn exited_processes_keep_their_final_report() {
    let mut q = Queues::new(true);
    q.pinned(&queue_pin(QueueKind::Qp, Verdict::Host, 1, 4096));
    q.exited(7);
    let rep = q.report();
    assert!(rep.procs[0].queues.exited);
    assert_eq!(rep.procs[0].queues.queue_pins(), 1);
    assert_eq!(q.held(), (0, 1));
}
