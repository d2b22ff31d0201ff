//! The tokio runtime of the data-plane binaries (`tunnel-proxy`, `resource-proxy`), sized to the
//! CPUs the process may use (its cgroup's quota or its affinity, as
//! [`std::thread::available_parallelism`] reads them). With one CPU, which is what the install
//! manifests give each proxy (a limit of `cpu: "1"`), a single-threaded scheduler: a
//! multi-threaded one would run the main task and the connections on two threads that can only
//! take turns on that CPU, and every wake-up between them costs a futex call and a context
//! switch (measured in docs/resource-proxy.md, "CPU per request on one CPU"). With more, the
//! work-stealing scheduler with a worker per CPU.
//!
//! Not for a binary that calls `tokio::task::block_in_place` (the controller), which needs the
//! multi-threaded scheduler.

/// Which scheduler a process with `cpus` usable CPUs gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    CurrentThread,
    MultiThread,
}

impl Flavor {
    pub fn for_cpus(cpus: usize) -> Flavor {
        if cpus <= 1 {
            Flavor::CurrentThread
        } else {
            Flavor::MultiThread
        }
    }
}

/// The runtime for this process's CPUs, with I/O and timers.
pub fn build() -> std::io::Result<tokio::runtime::Runtime> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut builder = match Flavor::for_cpus(cpus) {
        Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread(),
        Flavor::MultiThread => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cpu_gets_one_thread_more_get_a_worker_each() {
        assert_eq!(Flavor::for_cpus(1), Flavor::CurrentThread);
        assert_eq!(Flavor::for_cpus(2), Flavor::MultiThread);
        assert_eq!(Flavor::for_cpus(64), Flavor::MultiThread);
    }

    #[test]
    fn the_runtime_runs_tasks_and_timers() {
        let rt = build().unwrap();
        let out = rt.block_on(async {
            let task = tokio::spawn(async {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                7
            });
            task.await.unwrap()
        });
        assert_eq!(out, 7);
    }
}
