//! The `weir` binary. The command line lives in the library (`weir::cli`), so every other item
//! of the engine is crate-private and the compiler reports whatever nothing uses.

/// Batches allocate and free multi-megabyte buffers every few milliseconds. glibc's malloc hands
/// those to mmap or the heap depending on a threshold that moves with past frees, so throughput
/// depended on the order of batch sizes (measured: 2.56M vs 2.05M events/s from one change to the
/// first batches' sizes). mimalloc reuses such buffers either way.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option (its index in `mi_option_e`, mimalloc v3's `mimalloc.h`;
/// the bindings name no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long freed memory stays with the process before mimalloc returns it to the OS. Every
/// batch frees and allocates its multi-megabyte columns again a few milliseconds later, often
/// on another thread; with mimalloc v3's default (1 s) the freed pages were often returned in
/// between and faulted back in as zeroed pages: `perf` put 6-11% of all CPU time in the
/// kernel's page clearing, under 1% at 10 s. Memory idle for this long is still returned.
const PURGE_DELAY_MS: std::ffi::c_long = 10_000;

fn main() -> std::process::ExitCode {
    // SAFETY: sets a plain integer option; mimalloc reads options at any time.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
    weir::cli::main()
}
