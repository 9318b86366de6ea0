use super::*;
use crate::hooks::HOOKS;

#[test]
fn every_field_branch_has_a_row_read_at_one_of_its_own_tags() {
    let branches: Vec<u32> = NVIDIA_BRANCHES.iter().map(|b| b.branch).collect();
    for want in [535, 550, 565, 570, 575, 580, 590, 595] {
        assert!(branches.contains(&want), "{want} missing from {branches:?}");
    }
    assert!(branches.windows(2).all(|w| w[0] < w[1]), "oldest first: {branches:?}");
    for b in NVIDIA_BRANCHES {
        assert!(b.tag.starts_with(&format!("{}.", b.branch)), "{} read at {}", b.branch, b.tag);
        assert!(b.tag.split('.').all(|p| p.parse::<u32>().is_ok()), "{}", b.tag);
    }
}

#[test]
fn the_persistent_clients_acquire_is_nv_mem_acquire_nc_from_580() {
    for b in NVIDIA_BRANCHES {
        let nc = b.clients_default.iter().find(|c| c.get_pages[0] == "nv_mem_get_pages_nc").unwrap();
        let (acquire, trial) = if b.branch >= 580 {
            ("nv_mem_acquire_nc", ["nvidia_p2p_get_pages_persistent", "nvidia_p2p_put_pages_persistent"])
        } else {
            ("nv_mem_acquire", ["nvidia_p2p_get_pages", "nvidia_p2p_put_pages"])
        };
        assert_eq!((nc.acquire, nc.trial_pin), (acquire, trial), "{}", b.tag);
        assert_eq!(nc.get_pages[1], "nvidia_p2p_get_pages_persistent");
        assert_eq!(nc.put_pages, ["nv_mem_put_pages_nc", "nvidia_p2p_put_pages_persistent"]);
        // The legacy client keeps nv_mem_acquire in every branch.
        for legacy in b.clients(Some(0)).iter().filter(|c| c.invalidation) {
            assert_eq!((legacy.name, legacy.acquire), ("nv_mem", "nv_mem_acquire"), "{}", b.tag);
            assert_eq!(legacy.get_pages, ["nv_mem_get_pages", "nvidia_p2p_get_pages"]);
        }
        assert_eq!(b.has("nv_mem_acquire_nc"), b.branch >= 580, "{}", b.tag);
    }
}

#[test]
fn client_names_follow_persistent_api_support() {
    let names = |b: &NvidiaBranch, pas| b.clients(pas).iter().map(|c| c.name).collect::<Vec<_>>();
    for b in NVIDIA_BRANCHES {
        if b.branch < 560 {
            assert_eq!(b.clients_legacy, None, "no parameter before 560: {}", b.tag);
            assert_eq!(names(b, Some(1)), ["nv_mem", "nv_mem_nc"], "{}", b.tag);
        } else {
            assert_eq!(names(b, None), ["nv_mem"], "{}", b.tag);
            assert_eq!(names(b, Some(1)), ["nv_mem"], "{}", b.tag);
            assert_eq!(names(b, Some(0)), ["nv_mem", "nv_mem_nc"], "{}", b.tag);
        }
    }
}

#[test]
fn dmabuf_exporter_and_persistent_flags_by_branch() {
    for b in NVIDIA_BRANCHES {
        let exporter = if b.branch >= 580 { "nv_dmabuf" } else { "nvidia" };
        assert_eq!(b.dmabuf_exporter, exporter, "{}", b.tag);
        assert_eq!(b.persistent_flags_must_be_zero, b.branch < 570, "{}", b.tag);
    }
}

#[test]
fn a_version_finds_its_row_or_the_nearest_older() {
    assert_eq!(branch(580).map(|(b, i)| (b.tag, i)), Some(("580.65.06", false)));
    assert_eq!(branch(585).map(|(b, i)| (b.tag, i)), Some(("580.65.06", true)));
    assert_eq!(branch(555).map(|(b, i)| (b.tag, i)), Some(("550.163.01", true)));
    assert_eq!(branch(530).map(|(b, _)| b.tag), None);
}

/// The hook table's branch column and the matrix agree: a row names exactly the branches whose
/// flows call its function.
#[test]
fn hook_rows_say_which_branches_have_them() {
    let nvidia_rows: Vec<_> = HOOKS.iter().filter_map(|h| Some((h.function, h.nvidia?))).collect();
    assert!(nvidia_rows.len() >= 9, "{nvidia_rows:?}");
    for (function, branches) in &nvidia_rows {
        let in_flows = NVIDIA_BRANCHES.iter().any(|b| b.has(function));
        for b in NVIDIA_BRANCHES {
            if in_flows {
                assert_eq!(b.has(function), branches.has(b.branch), "{function} on {}", b.tag);
            } else {
                assert!(branches.has(b.branch), "{function}: every branch has its callbacks");
            }
        }
    }
    let acquire_nc = nvidia_rows.iter().find(|(f, _)| *f == "nv_mem_acquire_nc").expect("hooked");
    assert_eq!(acquire_nc.1.describe(), "NVIDIA 580+");
    for f in ["ib_umem_get_peer", "ib_peer_umem_get", "ib_umem_release"] {
        assert!(!nvidia_rows.iter().any(|(n, _)| *n == f), "{f} is MLNX_OFED's / the kernel's, not NVIDIA's");
    }
}

/// docs/drivers-nvfs.md's release table is `NVFS_RELEASES`: the same tags in the same rows,
/// each with its pinning rule named.
#[test]
fn the_nvidia_fs_page_shows_the_release_table() {
    let page = include_str!("../../../docs/drivers-nvfs.md");
    let table =
        page.split("## Releases").nth(1).and_then(|t| t.split("\n\n").find(|p| p.starts_with("| Tags")));
    let rows: Vec<&str> = table.expect("the releases table").lines().skip(2).collect();
    assert_eq!(rows.len(), NVFS_RELEASES.len(), "{rows:#?}");
    for (row, r) in rows.iter().zip(NVFS_RELEASES) {
        let tags: Vec<&str> = row.split('|').nth(1).unwrap().split(',').map(str::trim).collect();
        assert_eq!(tags, r.tags, "{row}");
        let rule = serde_json::to_value(r.pinning).unwrap();
        assert!(row.contains(rule.as_str().unwrap()), "{row} does not name {rule}");
    }
}

/// nvfs_init's choice, release by release: real GPU servers (x86-64 bare metal, or driver 555+)
/// pin persistently from v2.22.3 / v2.23.1; a guest before driver 555 keeps the legacy API.
#[test]
fn nvidia_fs_pins_as_its_init_chooses() {
    let r = |v| NvfsRelease::of(v).unwrap_or_else(|| panic!("{v}"));
    assert_eq!(r("2.17.5").legacy_pinning(Some(580), Some(false)), Some(true), "no choice before 2.22.3");
    assert_eq!(r("v2.22.3").legacy_pinning(Some(580), Some(true)), Some(true), "2.22.3: bare metal only");
    assert_eq!(r("2.22.3").legacy_pinning(None, Some(false)), Some(false));
    assert_eq!(r("2.28.4").legacy_pinning(Some(580), Some(true)), Some(false), "driver 555+ in a guest");
    assert_eq!(r("2.26.6").legacy_pinning(Some(550), Some(true)), Some(true));
    assert_eq!(r("2.26.6").legacy_pinning(Some(550), Some(false)), Some(false));
    assert_eq!(r("2.26.6").legacy_pinning(Some(550), None), None, "not known without the CPU's flags");
    // A version between rows takes the nearest older one; before the first, none.
    assert_eq!(r("2.21.0").pinning, NvfsPinning::AlwaysLegacy);
    assert_eq!(r("2.28.9").tags, ["v2.28.2", "v2.28.4"]);
    assert!(NvfsRelease::of("2.3.1").is_none() && NvfsRelease::of("garbage").is_none());
}
