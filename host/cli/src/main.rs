//! The `weir` binary: the process-wide settings (the allocator, no huge pages), then the command
//! line, which lives in the library (`weir::main`) so that the integration tests and benchmarks
//! build against the same crate.

/// Batches allocate and free multi-megabyte buffers every few milliseconds. glibc's malloc hands
/// those to mmap or the heap depending on a threshold that moves with past frees, so throughput
/// under it depends on the order of batch sizes (the first batches' sizes alone move it markedly).
/// mimalloc reuses such buffers either way.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // No transparent huge pages: mimalloc asks for them on its arenas, and then every fresh page
    // the batches' growing buffers touch is a 2 MiB one the kernel zeroes whole, a large share of
    // the CPU of sessions per user; without them every workload runs faster and peaks lower in
    // memory. Only this process is affected; a refusal (an old kernel) just leaves the default.
    // SAFETY: prctl with PR_SET_THP_DISABLE takes plain integers and touches no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    weir::main()
}
