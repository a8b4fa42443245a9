//! The daemon's request frames as any local user could send them: one line, at
//! most `MAX_FRAME` bytes, parsed as the server parses it.
#![no_main]

use libfuzzer_sys::fuzz_target;

use ferry::daemon::protocol::{MAX_FRAME, Request};

fuzz_target!(|bytes: &[u8]| {
    let line = &bytes[..bytes.len().min(MAX_FRAME)];
    let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
    if let Ok(request) = serde_json::from_slice::<Request>(line) {
        // What the server would log and answer about it serializes.
        let _ = serde_json::to_string(&request).unwrap();
    }
});
