//! A round's model computed on a thread of lower scheduling priority (nice [`NICE`]), so that
//! what a user waits for right now goes first when the cores are busy: the route lane pushing a
//! changed route, the watches, and whatever else shares the cores and the controller's cgroup
//! (on the benchmark's two cores: the data plane and the API server). A round's model takes tens
//! to hundreds of milliseconds of CPU with thousands of routes and its results are statuses,
//! which nobody waits on to the millisecond; without this, a round for the previous change held
//! a core while the next route change waited for it (docs/benchmarks.md, issue 21).
//!
//! Raising a thread's nice value needs no privilege, lowering it back does, so the work runs on
//! a thread of its own that ends with it rather than on a worker whose priority would stay low.

/// How much lower the model's thread runs than the controller's others (added to their nice
/// value; 19 is the lowest priority).
pub const NICE: i32 = 10;

/// Runs `work` on a scoped thread [`NICE`] steps nicer than the caller and returns its result;
/// if there is no such thread, the work runs on the caller's.
pub fn run<T: Send>(work: impl FnOnce() -> T + Send) -> T {
    let slot = std::sync::Mutex::new(Some(work));
    let take = || {
        slot.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .expect("the work runs once")
    };
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("model".into())
            // As a main thread's: the model recurses through routes' rules and filters.
            .stack_size(8 << 20)
            .spawn_scoped(scope, || {
                lower_priority();
                take()()
            });
        match thread {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(e) => {
                tracing::warn!(error = %e, "no thread for the model; computed on the worker");
                take()()
            }
        }
    })
}

fn lower_priority() {
    let me = Some(rustix::thread::gettid());
    let set = rustix::process::getpriority_process(me)
        .and_then(|now| rustix::process::setpriority_process(me, (now + NICE).min(19)));
    if let Err(e) = set {
        tracing::debug!(error = %e, "the model's thread keeps the caller's priority");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nice_of_this_thread() -> i32 {
        rustix::process::getpriority_process(Some(rustix::thread::gettid())).unwrap()
    }

    #[test]
    fn the_work_runs_at_lower_priority_and_the_caller_keeps_its_own() {
        let before = nice_of_this_thread();
        let (result, nice) = run(|| (6 * 7, nice_of_this_thread()));
        assert_eq!(result, 42);
        assert_eq!(nice, (before + NICE).min(19));
        assert_eq!(nice_of_this_thread(), before);
    }

    #[test]
    fn a_panic_in_the_work_reaches_the_caller() {
        let caught = std::panic::catch_unwind(|| run(|| -> u8 { panic!("model failed") }));
        let panic = caught.unwrap_err();
        assert_eq!(panic.downcast_ref::<&str>(), Some(&"model failed"));
    }
}
