//! The `weir` binary. The command line lives in the library (`weir::cli`), so every other item
//! of the engine is crate-private and the compiler reports whatever nothing uses.

/// Batches allocate and free multi-megabyte buffers every few milliseconds. glibc's malloc hands
/// those to mmap or the heap depending on a threshold that moves with past frees, so throughput
/// depended on the order of batch sizes (measured: 2.56M vs 2.05M events/s from one change to the
/// first batches' sizes). mimalloc reuses such buffers either way.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // No transparent huge pages: mimalloc asks for them on its arenas, and then every fresh page
    // the batches' growing buffers touch is a 2 MiB one the kernel zeroes whole (a quarter of the
    // CPU of sessions per user went to that). Measured in the same minutes: tumbling 1.07-1.35x,
    // sessions 1.29x, the keyed processor 1.05-1.07x, and 30-40% less peak memory. Only this
    // process is affected; a refusal (an old kernel) just leaves the default.
    // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    weir::cli::main()
}
