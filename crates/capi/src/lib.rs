//! uswap as a C library: `libuswap.so` and `include/uswap.h`.
//!
//! The C functions ([`ffi`]) are thin: they check pointers, turn the C configuration into a
//! [`frontend::Builder`] ([`config`]), call the Rust library ([`frontend::Uswap`]), and turn
//! its errors into a code plus a per-thread message ([`status`]). A panic never crosses the
//! C boundary: it becomes `USWAP_ERR_SYSTEM` with its message.
//!
//! ABI rules: the structs are `#[repr(C)]` and their sizes are asserted here and in the C
//! example (`_Static_assert`); `struct uswap_config` starts with its own size, so a program
//! built against an older, shorter header still works (the missing fields keep their
//! defaults).

#![deny(unsafe_code)]

pub mod config;
pub mod ffi;
pub mod status;

pub use config::{uswap_config, uswap_stats};
pub use status::Status;
