//! The table against the symbols of each kernel generation (kallsyms fixtures in `kallsyms/`,
//! written from the sources of Debian 6.1 and 6.12 and the RDMA pulls for 7.1 and 7.2): every
//! generation keeps a pin hook, a dma-buf hook and the verb hooks, and which ones is exact.

use super::*;

fn found(kallsyms: &str, role: Role) -> Vec<&'static str> {
    let rows: Vec<&Hook> = HOOKS.iter().filter(|h| h.role == role && h.is_kernel()).collect();
    let wanted: Vec<&str> = rows.iter().flat_map(|h| h.symbols()).collect();
    let homes = crate::procfs::kallsyms_homes(kallsyms.as_bytes(), &wanted);
    rows.iter().filter(|h| h.symbols().iter().any(|s| homes.contains_key(*s))).map(|h| h.function).collect()
}

const KERNELS: [(&str, &str); 4] = [
    ("6.1", include_str!("kallsyms/6.1.txt")),
    ("6.12", include_str!("kallsyms/6.12.txt")),
    ("7.1", include_str!("kallsyms/7.1.txt")),
    ("7.2", include_str!("kallsyms/7.2.txt")),
];

#[test]
fn every_kernel_generation_has_its_pin_hooks() {
    let want: [(&str, &[&str]); 4] = [
        ("6.1", &["ib_umem_get"]),
        ("6.12", &["ib_umem_get"]),
        ("7.1", &["ib_umem_get"]),
        // No ib_umem_get symbol in 7.2: the attribute and descriptor getters carry every pin.
        (
            "7.2",
            &[
                "ib_umem_get_attr_or_va",
                "ib_umem_get_attr",
                "ib_umem_get_cq_buf",
                "ib_umem_get_cq_buf_or_va",
                "ib_umem_get_desc",
            ],
        ),
    ];
    for ((kernel, kallsyms), (k, pins)) in KERNELS.iter().zip(want) {
        assert_eq!(*kernel, k);
        assert_eq!(found(kallsyms, Role::UmemPinned), pins, "{kernel}");
    }
}

#[test]
fn every_kernel_generation_has_its_dmabuf_hooks() {
    let dmabuf = |k: &str| found(KERNELS.iter().find(|(n, _)| *n == k).unwrap().1, Role::DmabufRegister);
    assert_eq!(dmabuf("6.1"), ["ib_umem_dmabuf_get_pinned", "ib_umem_dmabuf_get"]);
    assert_eq!(
        dmabuf("6.12"),
        ["ib_umem_dmabuf_get_pinned", "ib_umem_dmabuf_get", "ib_umem_dmabuf_get_pinned_with_dma_device"]
    );
    assert!(dmabuf("7.1").contains(&"ib_umem_dmabuf_get_pinned_revocable_and_lock"));
}

#[test]
fn the_verb_hooks_attach_on_every_generation() {
    for (kernel, kallsyms) in KERNELS {
        let verbs = found(kallsyms, Role::PinVerb);
        for v in
            ["uverbs reg_mr", "uverbs create_cq", "uverbs create_qp", "uverbs create_srq", "uverbs create_wq"]
        {
            assert!(verbs.contains(&v), "{kernel}: {verbs:?}");
        }
        // mlx5's DEVX UMEM handler and doorbell mapping, where mlx5_ib is loaded.
        assert!(
            verbs.contains(&"mlx5 devx_umem_reg") && verbs.contains(&"doorbell record mapping"),
            "{kernel}"
        );
    }
    // 6.17+ registers memory through the REG_MR ioctl method too: the register row has it.
    let reg = by_id(HookId::VerbRegister).symbols();
    assert!(reg.contains(&"ib_uverbs_handler_UVERBS_METHOD_REG_MR"), "{reg:?}");
}
