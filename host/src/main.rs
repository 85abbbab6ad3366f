//! The `weir` binary. The command line lives in the library (`weir::cli`), so every other item
//! of the engine is crate-private and the compiler reports whatever nothing uses.

/// Batches allocate and free multi-megabyte buffers every few milliseconds. glibc's malloc hands
/// those to mmap or the heap depending on a threshold that moves with past frees, so throughput
/// depended on the order of batch sizes (measured: 2.56M vs 2.05M events/s from one change to the
/// first batches' sizes). mimalloc reuses such buffers either way.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    weir::cli::main()
}
