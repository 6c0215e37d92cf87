//! Name-based classification: runtime API calls and memcpy labels, CUDA and HIP alike.

use super::{CopyDir, MemKind, RuntimeKind};

/// What a CUDA/HIP runtime or driver call does, from its name.
pub fn classify_runtime(name: &str) -> RuntimeKind {
    // Normalise hip* and cu* prefixes to the cuda* spelling.
    let n = name
        .strip_prefix("cuda")
        .or_else(|| name.strip_prefix("hip"))
        .or_else(|| name.strip_prefix("cu"))
        .unwrap_or(name);
    // GPU-side cuda_sync records land here too: "Stream Sync", "Context Sync", ...
    match n {
        "DeviceSynchronize" | "StreamSynchronize" | "EventSynchronize" | "CtxSynchronize" => {
            return RuntimeKind::Sync
        }
        "Stream Sync" | "Context Sync" | "Event Sync" => return RuntimeKind::Sync,
        "StreamWaitEvent" | "Stream Wait Event" => return RuntimeKind::StreamWait,
        "EventRecord" | "EventQuery" | "EventRecordWithFlags" | "StreamQuery" => {
            return RuntimeKind::Event
        }
        _ => {}
    }
    if n.starts_with("GraphLaunch") {
        RuntimeKind::GraphLaunch
    } else if n.starts_with("LaunchKernel")
        || n.starts_with("ExtModuleLaunchKernel")
        || n.starts_with("ModuleLaunchKernel")
        || n.starts_with("LaunchCooperativeKernel")
        || n.starts_with("ExtLaunchKernel")
        || n == "LaunchKernelExC"
        || n.starts_with("LaunchKernelEx")
    {
        RuntimeKind::Launch
    } else if n.starts_with("Memcpy") {
        RuntimeKind::Memcpy
    } else if n.starts_with("Memset") {
        RuntimeKind::Memset
    } else if n.starts_with("Malloc")
        || n.starts_with("MemAlloc")
        || n.starts_with("HostAlloc")
        || n.starts_with("ExtMallocWithFlags")
    {
        RuntimeKind::Malloc
    } else if n.starts_with("Free") || n.starts_with("MemFree") || n.starts_with("HostFree") {
        RuntimeKind::Free
    } else {
        RuntimeKind::Other
    }
}

/// Direction and memory kinds of a memcpy from its label, e.g.
/// `Memcpy HtoD (Pageable -> Device)` or `Memcpy DtoD (Device -> Device)`.
/// `kind_arg` is ROCm's `args.kind` (`HtoD`), used when the label says less.
pub fn parse_memcpy_name(name: &str, kind_arg: Option<&str>) -> (CopyDir, MemKind, MemKind) {
    let dir_of = |s: &str| match s {
        "HtoD" => Some(CopyDir::HtoD),
        "DtoH" => Some(CopyDir::DtoH),
        "DtoD" => Some(CopyDir::DtoD),
        "HtoH" => Some(CopyDir::HtoH),
        "PtoP" => Some(CopyDir::PtoP),
        _ => None,
    };
    let mut dir = CopyDir::Unknown;
    for word in name.split([' ', '(', ')']) {
        if let Some(d) = dir_of(word) {
            dir = d;
            break;
        }
    }
    if dir == CopyDir::Unknown {
        if let Some(d) = kind_arg.and_then(dir_of) {
            dir = d;
        }
    }
    let mem_of = |s: &str| match s.trim() {
        "Pageable" => MemKind::Pageable,
        "Pinned" => MemKind::Pinned,
        "Device" => MemKind::Device,
        "Host" => MemKind::Host,
        "Managed" => MemKind::Managed,
        _ => MemKind::Unknown,
    };
    let (mut src, mut dst) = (MemKind::Unknown, MemKind::Unknown);
    if let (Some(a), Some(b)) = (name.find('('), name.rfind(')')) {
        if a < b {
            if let Some((s, d)) = name[a + 1..b].split_once("->") {
                src = mem_of(s);
                dst = mem_of(d);
            }
        }
    }
    (dir, src, dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_names() {
        assert_eq!(classify_runtime("cudaLaunchKernel"), RuntimeKind::Launch);
        assert_eq!(classify_runtime("cuLaunchKernel"), RuntimeKind::Launch);
        assert_eq!(classify_runtime("cudaLaunchKernelExC"), RuntimeKind::Launch);
        assert_eq!(
            classify_runtime("hipExtModuleLaunchKernel"),
            RuntimeKind::Launch
        );
        assert_eq!(classify_runtime("hipGraphLaunch"), RuntimeKind::GraphLaunch);
        assert_eq!(classify_runtime("cudaStreamSynchronize"), RuntimeKind::Sync);
        assert_eq!(classify_runtime("hipEventSynchronize"), RuntimeKind::Sync);
        assert_eq!(classify_runtime("cudaMemcpyAsync"), RuntimeKind::Memcpy);
        assert_eq!(classify_runtime("hipMemcpyWithStream"), RuntimeKind::Memcpy);
        assert_eq!(
            classify_runtime("cudaStreamWaitEvent"),
            RuntimeKind::StreamWait
        );
        assert_eq!(classify_runtime("cudaEventQuery"), RuntimeKind::Event);
        assert_eq!(classify_runtime("cudaMalloc"), RuntimeKind::Malloc);
        assert_eq!(classify_runtime("cudaGetDeviceCount"), RuntimeKind::Other);
    }

    #[test]
    fn memcpy_labels() {
        assert_eq!(
            parse_memcpy_name("Memcpy HtoD (Pageable -> Device)", None),
            (CopyDir::HtoD, MemKind::Pageable, MemKind::Device)
        );
        assert_eq!(
            parse_memcpy_name("Memcpy DtoH (Device -> Pinned)", None),
            (CopyDir::DtoH, MemKind::Device, MemKind::Pinned)
        );
        assert_eq!(
            parse_memcpy_name("Memcpy HtoD (Host -> Device)", Some("HtoD")),
            (CopyDir::HtoD, MemKind::Host, MemKind::Device)
        );
        assert_eq!(parse_memcpy_name("Memcpy", Some("DtoD")).0, CopyDir::DtoD);
        assert_eq!(parse_memcpy_name("weird", None).0, CopyDir::Unknown);
    }
}
