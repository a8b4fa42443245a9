//! A token store's `.idx` as anyone who can write to a shared cache could write it:
//! either refused, or lengths that fill exactly the `.bin` they index.
#![no_main]

use libfuzzer_sys::fuzz_target;

use ferry::cache::manifest::StoreDtype;
use ferry::cache::token_store::read_index;

fuzz_target!(|input: (u32, bool, &[u8])| {
    let (bin_size, wide, index) = input;
    let dtype = if wide { StoreDtype::Int32 } else { StoreDtype::Uint16 };
    if let Ok(lengths) = read_index(index, dtype, u64::from(bin_size)) {
        let tokens: u64 = lengths.iter().map(|&length| u64::from(length)).sum();
        assert_eq!(tokens * dtype.bytes() as u64, u64::from(bin_size));
        assert!(lengths.iter().all(|&length| length <= i32::MAX as u32));
    }
});
