//! The top-level fields of a trace object around `traceEvents`.
//!
//! Input: each field's key and raw JSON bytes, as the object walk found them. Output:
//! the profile's metadata ([`crate::model::TraceMeta`] fields: schema, versions, the
//! profiler's settings, device properties, distributed info). A field that is not
//! valid JSON is counted and ignored. Events are not read here.

use crate::model::{CounterSeverity, DeviceProps, DistributedInfo, Profile};
use crate::text;

pub(super) fn read_top_level(top: &[(String, &[u8])], p: &mut Profile) {
    use serde_json::Value;
    for (key, raw) in top {
        let Ok(v) = serde_json::from_slice::<Value>(raw) else {
            p.counters.add(
                "bad_top_level_field",
                CounterSeverity::Info,
                "top-level fields that are not valid JSON; ignored",
                1,
            );
            continue;
        };
        let as_bool = |v: &Value| v.as_bool().or_else(|| v.as_i64().map(|i| i != 0));
        match key.as_str() {
            "schemaVersion" => p.meta.schema_version = v.as_i64(),
            "traceName" => p.meta.trace_name = v.as_str().map(text::cleaned),
            "cuda_runtime_version" => p.meta.cuda_runtime_version = v.as_i64(),
            "cuda_driver_version" => p.meta.cuda_driver_version = v.as_i64(),
            "hip_runtime_version" => {
                p.meta.hip_runtime_version = v.as_i64();
                p.meta.rocm = true;
            }
            "roctracer_version" | "hip_driver_version" => p.meta.rocm = true,
            "record_shapes" => p.meta.record_shapes = as_bool(&v),
            "with_stack" => p.meta.with_stack = as_bool(&v),
            "profile_memory" => p.meta.profile_memory = as_bool(&v),
            "with_flops" => p.meta.with_flops = as_bool(&v),
            "with_modules" => p.meta.with_modules = as_bool(&v),
            "deviceProperties" => {
                if let Some(arr) = v.as_array() {
                    p.meta.devices = arr.iter().filter_map(device_props).collect();
                }
            }
            "distributedInfo" => {
                p.meta.distributed = Some(DistributedInfo {
                    backend: v.get("backend").and_then(Value::as_str).map(text::cleaned),
                    rank: v.get("rank").and_then(Value::as_i64),
                    world_size: v.get("world_size").and_then(Value::as_i64),
                    nccl_version: v
                        .get("nccl_version")
                        .and_then(Value::as_str)
                        .map(text::cleaned),
                })
            }
            _ => {}
        }
    }
}

fn device_props(v: &serde_json::Value) -> Option<DeviceProps> {
    let u = |k: &str| v.get(k).and_then(|x| x.as_u64());
    let i = |k: &str| v.get(k).and_then(|x| x.as_i64());
    Some(DeviceProps {
        id: i("id")?,
        name: text::cleaned(v.get("name").and_then(|x| x.as_str()).unwrap_or("")),
        total_global_mem_bytes: u("totalGlobalMem").unwrap_or(0),
        compute_major: i("computeMajor").unwrap_or(0),
        compute_minor: i("computeMinor").unwrap_or(0),
        num_sms: u("numSms").unwrap_or(0) as u32,
        max_threads_per_sm: u("maxThreadsPerMultiprocessor").unwrap_or(0) as u32,
        regs_per_sm: u("regsPerMultiprocessor").unwrap_or(0) as u32,
        shared_mem_per_sm_bytes: u("sharedMemPerMultiprocessor").unwrap_or(0),
        warp_size: u("warpSize").unwrap_or(32) as u32,
    })
}

// ---------------------------------------------------------------------------------
