//! Kernel BTF: struct field offsets (through anonymous members) for the programs (Rust eBPF has
//! no CO-RE field relocations, so they are resolved here from the running kernel and passed as
//! globals), and which BTF object describes a function (vmlinux or a module) for fentry/fexit.

use std::{
    cell::{OnceCell, RefCell},
    collections::HashMap,
    path::{Path, PathBuf},
    rc::Rc,
};

use btf_rs::{Btf, Type};

use super::btf_memo::{self, Memo};

const BTF_DIR: &str = "/sys/kernel/btf";

/// The running kernel's BTF: vmlinux plus module BTF, each parsed only when a question is not
/// answered by this boot's memo (`btf_memo`).
pub struct KernelBtf {
    dir: PathBuf,
    vmlinux: OnceCell<Option<Btf>>,
    /// Module BTF parsed so far (None: the module has none).
    modules: RefCell<HashMap<String, Option<Rc<Btf>>>>,
    /// Module -> a hash of its BTF bytes (None: no BTF file).
    module_hashes: RefCell<HashMap<String, Option<u64>>>,
    memo: RefCell<Memo>,
}

impl KernelBtf {
    /// The running kernel's, with this boot's memo where gdr-trace may keep one.
    pub fn open() -> Self {
        let dir = Path::new(BTF_DIR);
        let memo = match (btf_memo::boot_id(), std::fs::metadata(dir.join("vmlinux"))) {
            (Some(boot), Ok(m)) => Memo::open(Path::new(btf_memo::DEFAULT_PATH), &boot, m.len()),
            _ => Memo::none(),
        };
        Self::with_memo(dir, memo)
    }

    /// BTF under `dir`, every question looked up.
    pub fn open_at(dir: &Path) -> Self {
        Self::with_memo(dir, Memo::none())
    }

    pub fn with_memo(dir: &Path, memo: Memo) -> Self {
        Self {
            dir: dir.to_path_buf(),
            vmlinux: OnceCell::new(),
            modules: RefCell::default(),
            module_hashes: RefCell::default(),
            memo: RefCell::new(memo),
        }
    }

    /// Whether this boot's memo answered from a file (nothing parsed for what it knew).
    pub fn memo_loaded(&self) -> bool {
        self.memo.borrow().loaded
    }

    /// Remembers what was found for the next start of this boot (where there is a memo).
    pub fn save_memo(&self) {
        self.memo.borrow_mut().save();
    }

    fn ask(&self, question: String, find: impl FnOnce() -> Option<u32>) -> Option<u32> {
        if let Some(known) = self.memo.borrow().known(&question) {
            return known;
        }
        // Looked up without the memo borrowed (finding may parse, and parsing asks nothing).
        let a = find();
        self.memo.borrow_mut().remember(question, a);
        a
    }

    /// Whether the kernel has vmlinux BTF that parses.
    pub fn has_vmlinux(&self) -> bool {
        self.ask("vmlinux parses".into(), || self.vmlinux().map(|_| 1)).is_some()
    }

    /// The parsed vmlinux BTF, if the kernel has one (parsed now if it was not yet).
    pub fn vmlinux(&self) -> Option<&Btf> {
        self.vmlinux
            .get_or_init(|| {
                // Mapped, not parsed whole (a few types are looked up): faster to open and
                // megabytes smaller resident; kernels whose sysfs BTF cannot be mapped (before
                // 6.16) are read.
                let t = std::time::Instant::now();
                let path = self.dir.join("vmlinux");
                let b = Btf::from_file_with_backend(&path, btf_rs::Backend::Mmap)
                    .or_else(|_| Btf::from_file(&path))
                    .ok();
                tracing::debug!("vmlinux BTF (btf-rs) opened in {:?}", t.elapsed());
                b
            })
            .as_ref()
    }

    /// Module BTF, split on vmlinux (parsed once).
    pub fn module(&self, module: &str) -> Option<Rc<Btf>> {
        if let Some(b) = self.modules.borrow().get(module) {
            return b.clone();
        }
        let base = self.vmlinux()?;
        let t = std::time::Instant::now();
        let b = Btf::from_split_file(self.dir.join(module), base).ok().map(Rc::new);
        tracing::debug!("{module} BTF (btf-rs) parsed in {:?}", t.elapsed());
        self.modules.borrow_mut().insert(module.to_string(), b.clone());
        b
    }

    /// How questions about `module`'s BTF are named in the memo: by a hash of its bytes (a
    /// module reloaded with other BTF asks anew). None: the module has no BTF file.
    fn module_key(&self, module: &str) -> Option<String> {
        let hash =
            *self.module_hashes.borrow_mut().entry(module.to_string()).or_insert_with(|| {
                std::fs::read(self.dir.join(module)).ok().map(|b| btf_memo::bytes_hash(&b))
            });
        hash.map(|h| format!("{module}@{h:016x}"))
    }

    /// Names of the modules that ship BTF.
    pub fn modules(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else { return vec![] };
        rd.flatten().filter_map(|e| e.file_name().into_string().ok()).filter(|n| n != "vmlinux").collect()
    }

    /// Byte offset of `strukt.member`, looked up in vmlinux, then in `modules_first`, then
    /// in every module's BTF. None when no BTF describes it.
    pub fn member_offset(&self, strukt: &str, member: &str, modules_first: &[&str]) -> Option<u32> {
        let field = format!("{strukt}.{member}");
        if let Some(off) = self.vmlinux_offset(strukt, member) {
            return Some(off);
        }
        let rest = self.modules();
        let order = modules_first.iter().map(|s| s.to_string()).chain(rest);
        order.filter_map(|m| Some((self.module_key(&m)?, m))).find_map(|(key, m)| {
            self.ask(format!("offset {key} {field}"), || {
                self.module(&m).and_then(|b| offset_in(&b, strukt, member))
            })
        })
    }

    /// Byte offset of `strukt.member` as the module that defines it says. Where one of `owners`
    /// is loaded as a module, only their BTF counts: vmlinux may describe the same struct as
    /// another build of it (the inbox ib_core's `struct ib_device`, while MLNX_OFED's DKMS
    /// ib_core, with another layout and usually no BTF, is the one loaded). Where none is a
    /// module (built in, or not loaded), as [`Self::member_offset`].
    pub fn owned_member_offset(&self, strukt: &str, member: &str, owners: &[&str]) -> Option<u32> {
        let sys_module = self.dir.parent().and_then(Path::parent).map(|sys| sys.join("module"));
        let is_module = |m: &&str| sys_module.as_ref().is_some_and(|d| d.join(m).join("initstate").exists());
        if !owners.iter().any(is_module) {
            return self.member_offset(strukt, member, owners);
        }
        let field = format!("{strukt}.{member}");
        owners.iter().filter_map(|m| Some((self.module_key(m)?, *m))).find_map(|(key, m)| {
            self.ask(format!("offset {key} {field}"), || {
                self.module(m).and_then(|b| offset_in(&b, strukt, member))
            })
        })
    }

    /// Byte offset of `strukt.member` in vmlinux.
    pub fn vmlinux_offset(&self, strukt: &str, member: &str) -> Option<u32> {
        self.ask(format!("offset vmlinux {strukt}.{member}"), || {
            self.vmlinux().and_then(|b| offset_in(b, strukt, member))
        })
    }

    /// How many parameters the function pointer `strukt.member` of vmlinux takes (e.g.
    /// `kiocb.ki_complete`: 3 before 5.16, 2 since).
    pub fn vmlinux_fn_params(&self, strukt: &str, member: &str) -> Option<u32> {
        self.ask(format!("params vmlinux {strukt}.{member}"), || {
            self.vmlinux().and_then(|b| fn_member_params(b, strukt, member))
        })
    }

    /// The BTF type id of function `func` and the module whose BTF holds it (None: vmlinux).
    pub fn func_id(&self, func: &str, module: Option<&str>) -> Result<u32, String> {
        let missing = |name: &str| {
            let what = if module.is_some() { format!("module {name}") } else { name.to_string() };
            format!("no BTF for {what} ({}/{name} missing)", self.dir.display())
        };
        let name = module.unwrap_or("vmlinux");
        let key = match module {
            None => "vmlinux".to_string(),
            Some(m) => self.module_key(m).ok_or_else(|| missing(m))?,
        };
        let question = format!("func {key} {func}");
        let known = self.memo.borrow().known(&question);
        let id = match known {
            Some(id) => id,
            None => {
                let id = match module {
                    None => find_func(self.vmlinux().ok_or_else(|| missing(name))?, func),
                    Some(m) => find_func(&*self.module(m).ok_or_else(|| missing(m))?, func),
                };
                self.memo.borrow_mut().remember(question, id);
                id
            }
        };
        id.ok_or_else(|| format!("{name} BTF has no function {func}"))
    }
}

fn find_func(btf: &Btf, func: &str) -> Option<u32> {
    let ids = btf.resolve_ids_by_name(func).unwrap_or_default();
    ids.into_iter().find(|id| matches!(btf.resolve_type_by_id(*id), Ok(Type::Func(_))))
}

/// Parameters of the function pointer `strukt.member`; None when it is not one.
pub fn fn_member_params(btf: &Btf, strukt: &str, member: &str) -> Option<u32> {
    btf.resolve_types_by_name(strukt).ok()?.into_iter().find_map(|ty| {
        let Type::Struct(s) = ty else { return None };
        let m = s.members.iter().find(|m| btf.resolve_name(*m).is_ok_and(|n| n == member))?;
        let Ok(Type::Ptr(p)) = btf.resolve_chained_type(m) else { return None };
        match btf.resolve_chained_type(&p) {
            Ok(Type::FuncProto(f)) => Some(f.parameters.len() as u32),
            _ => None,
        }
    })
}

/// Byte offset of `member` in `struct strukt`, looking through anonymous struct/union members.
pub fn offset_in(btf: &Btf, strukt: &str, member: &str) -> Option<u32> {
    btf.resolve_types_by_name(strukt).ok()?.into_iter().find_map(|ty| match ty {
        Type::Struct(s) => find_in(btf, &s, member, 0, 0),
        _ => None,
    })
}

fn find_in(btf: &Btf, s: &btf_rs::Struct, member: &str, base_bits: u32, depth: u32) -> Option<u32> {
    if depth > 4 {
        return None;
    }
    for m in &s.members {
        let name = btf.resolve_name(m).unwrap_or_default();
        let bits = base_bits + m.bit_offset();
        if name == member {
            return Some(bits / 8);
        }
        if name.is_empty() {
            if let Ok(Type::Struct(inner) | Type::Union(inner)) = btf.resolve_chained_type(m) {
                if let Some(o) = find_in(btf, &inner, member, bits, depth + 1) {
                    return Some(o);
                }
            }
        }
    }
    None
}
