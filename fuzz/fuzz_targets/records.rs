//! The other JSON records ferry reads from a shared cache or a destination (shard
//! records, leases, build progress, stage state files) and the daemon's replies:
//! the first byte picks which; parsing refuses or accepts, never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    let Some((&kind, json)) = bytes.split_first() else { return };
    match kind % 5 {
        0 => drop(serde_json::from_slice::<ferry::prepare::ShardRecord>(json)),
        1 => drop(serde_json::from_slice::<ferry::cache::lease::LeaseInfo>(json)),
        2 => drop(serde_json::from_slice::<ferry::cache::build_progress::BuildProgress>(json)),
        3 => {
            // A state file read back is written back the same.
            if let Ok(state) = serde_json::from_slice::<ferry::cache::staging::StageState>(json) {
                let again: ferry::cache::staging::StageState =
                    serde_json::from_slice(&serde_json::to_vec(&state).unwrap()).unwrap();
                assert_eq!(again.phase, state.phase);
            }
        }
        _ => drop(serde_json::from_slice::<ferry::daemon::protocol::Reply>(json)),
    }
});
