//! Kernel BTF: struct field offsets for the programs (Rust eBPF has no CO-RE field relocations,
//! so they are resolved here from the running kernel and passed as globals), and which BTF
//! object describes a function (vmlinux or a module) for fentry/fexit.

use std::{
    cell::RefCell,
    collections::HashMap,
    path::{Path, PathBuf},
    rc::Rc,
};

use btf_rs::{Btf, Type};

const BTF_DIR: &str = "/sys/kernel/btf";

/// The running kernel's BTF: vmlinux plus module BTF loaded on demand.
pub struct KernelBtf {
    dir: PathBuf,
    vmlinux: Option<Btf>,
    /// Module BTF parsed so far (None: the module has none).
    modules: RefCell<HashMap<String, Option<Rc<Btf>>>>,
}

impl KernelBtf {
    pub fn open() -> Self {
        Self::open_at(Path::new(BTF_DIR))
    }

    pub fn open_at(dir: &Path) -> Self {
        // Mapped, not parsed whole (a few types are looked up): faster to open and megabytes
        // smaller resident; kernels whose sysfs BTF cannot be mapped (before 6.16) are read.
        let path = dir.join("vmlinux");
        let vmlinux =
            Btf::from_file_with_backend(&path, btf_rs::Backend::Mmap).or_else(|_| Btf::from_file(&path)).ok();
        Self { dir: dir.to_path_buf(), vmlinux, modules: RefCell::default() }
    }

    pub fn has_vmlinux(&self) -> bool {
        self.vmlinux.is_some()
    }

    /// The parsed vmlinux BTF, if the kernel has one.
    pub fn vmlinux(&self) -> Option<&Btf> {
        self.vmlinux.as_ref()
    }

    /// Module BTF, split on vmlinux (parsed once).
    pub fn module(&self, module: &str) -> Option<Rc<Btf>> {
        if let Some(b) = self.modules.borrow().get(module) {
            return b.clone();
        }
        let base = self.vmlinux.as_ref()?;
        let t = std::time::Instant::now();
        let b = Btf::from_split_file(self.dir.join(module), base).ok().map(Rc::new);
        tracing::debug!("{module} BTF (btf-rs) parsed in {:?}", t.elapsed());
        self.modules.borrow_mut().insert(module.to_string(), b.clone());
        b
    }

    /// Names of the modules that ship BTF.
    pub fn modules(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return vec![] };
        rd.flatten().filter_map(|e| e.file_name().into_string().ok()).filter(|n| n != "vmlinux").collect()
    }

    /// Byte offset of `strukt.member`, looked up in vmlinux, then in `modules_first`, then
    /// in every module's BTF. None when no BTF describes it.
    pub fn member_offset(&self, strukt: &str, member: &str, modules_first: &[&str]) -> Option<u32> {
        if let Some(off) = self.vmlinux.as_ref().and_then(|b| offset_in(b, strukt, member)) {
            return Some(off);
        }
        let rest = self.modules();
        let order = modules_first.iter().map(|s| s.to_string()).chain(rest);
        order.filter_map(|m| self.module(&m)).find_map(|b| offset_in(&b, strukt, member))
    }

    /// The BTF type id of function `func` and the module whose BTF holds it (None: vmlinux).
    pub fn func_id(&self, func: &str, module: Option<&str>) -> Result<u32, String> {
        let owned;
        let (btf, name) = match module {
            None => match self.vmlinux.as_ref() {
                Some(b) => (b, "vmlinux"),
                None => return Err(format!("no BTF for vmlinux ({}/vmlinux missing)", self.dir.display())),
            },
            Some(m) => match self.module(m) {
                Some(b) => {
                    owned = b;
                    (&*owned, m)
                }
                None => return Err(format!("no BTF for module {m} ({}/{m} missing)", self.dir.display())),
            },
        };
        let ids = btf.resolve_ids_by_name(func).unwrap_or_default();
        ids.into_iter()
            .find(|id| matches!(btf.resolve_type_by_id(*id), Ok(Type::Func(_))))
            .ok_or_else(|| format!("{name} BTF has no function {func}"))
    }
}

fn offset_in(btf: &Btf, strukt: &str, member: &str) -> Option<u32> {
    for ty in btf.resolve_types_by_name(strukt).ok()? {
        let Type::Struct(s) = ty else { continue };
        for m in &s.members {
            if btf.resolve_name(m).ok().as_deref() == Some(member) {
                return Some(m.bit_offset() / 8);
            }
        }
    }
    None
}
