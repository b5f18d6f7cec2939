//! Ordered read-ahead on worker threads: jobs run in parallel, results come back in job
//! order, and at most `depth` results exist at once (queued, in progress or waiting to be
//! taken), which is what bounds the loader's host memory. With no workers, each job runs on
//! the consumer's thread when its result is taken: a web page has no threads to spawn. A
//! page's module with threads hands each job to its pool instead ([`Prefetch::spawned`]).
//!
//! Written here rather than taken from rayon: rayon's parallel iterators collect a whole
//! input before yielding and have no bound on results held ahead of the consumer.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

type Job<J> = (u64, J);

/// Hands a job to a pool that runs it on one of its threads ([`Prefetch::spawned`]).
pub type Spawn = fn(Box<dyn FnOnce() + Send>);

type Work<J, T> = Arc<dyn Fn(J) -> T + Send + Sync>;

/// What a job handed to a pool needs: the pool's hand, the work, where its result goes.
struct Spawned<J, T> {
    spawn: Spawn,
    work: Work<J, T>,
    results: Sender<(u64, T)>,
}

pub struct Prefetch<J, T> {
    jobs: Box<dyn Iterator<Item = J> + Send>,
    /// Set when there are no workers: jobs run as their results are taken.
    inline: Option<Work<J, T>>,
    /// Set when each job is handed to a pool as it is issued.
    spawned: Option<Spawned<J, T>>,
    to_workers: Option<Sender<Job<J>>>,
    from_workers: Receiver<(u64, T)>,
    waiting: BTreeMap<u64, T>,
    issued: u64,
    yielded: u64,
    depth: u64,
}

impl<J: Send + 'static, T: Send + 'static> Prefetch<J, T> {
    /// Runs `work` on each of `jobs` on `workers` threads, `depth` results ahead of the
    /// consumer; `workers == 0` runs each job on the consumer's thread instead.
    pub fn new(
        jobs: impl Iterator<Item = J> + Send + 'static,
        workers: usize,
        depth: usize,
        work: impl Fn(J) -> T + Send + Sync + 'static,
    ) -> Self {
        let (to_workers, queue) = channel::<Job<J>>();
        let (results, from_workers) = channel();
        if workers == 0 {
            return Self {
                jobs: Box::new(jobs),
                inline: Some(Arc::new(work)),
                spawned: None,
                to_workers: None,
                from_workers,
                waiting: BTreeMap::new(),
                issued: 0,
                yielded: 0,
                depth: 1,
            };
        }
        let queue = Arc::new(Mutex::new(queue));
        let work = Arc::new(work);
        for _ in 0..workers {
            let (queue, results, work) = (queue.clone(), results.clone(), work.clone());
            std::thread::spawn(move || {
                loop {
                    // The lock is held only to take a job, never while working.
                    let job = match queue.lock() {
                        Ok(queue) => queue.recv(),
                        Err(_) => return,
                    };
                    let Ok((index, job)) = job else { return };
                    if results.send((index, work(job))).is_err() {
                        return;
                    }
                }
            });
        }
        Self::issuing(Box::new(jobs), from_workers, depth, Some(to_workers), None)
    }

    /// Runs `work` on each of `jobs`, each handed to `spawn` as it is issued, `depth`
    /// results ahead of the consumer: for a build that has a pool's threads but cannot start
    /// threads of its own (a web page's module with threads, whose rayon pool is Web
    /// Workers). A job that panics leaves its result missing and the consumer waiting; the
    /// page's module aborts on a panic.
    pub fn spawned(
        jobs: impl Iterator<Item = J> + Send + 'static,
        depth: usize,
        work: impl Fn(J) -> T + Send + Sync + 'static,
        spawn: Spawn,
    ) -> Self {
        let (results, from_workers) = channel();
        let spawned = Spawned {
            spawn,
            work: Arc::new(work),
            results,
        };
        Self::issuing(Box::new(jobs), from_workers, depth, None, Some(spawned))
    }

    /// A read-ahead whose results come on `from_workers`, its first `depth` jobs issued
    /// (to the worker threads' queue or to the pool).
    fn issuing(
        jobs: Box<dyn Iterator<Item = J> + Send>,
        from_workers: Receiver<(u64, T)>,
        depth: usize,
        to_workers: Option<Sender<Job<J>>>,
        spawned: Option<Spawned<J, T>>,
    ) -> Self {
        let mut prefetch = Self {
            jobs,
            inline: None,
            spawned,
            to_workers,
            from_workers,
            waiting: BTreeMap::new(),
            issued: 0,
            yielded: 0,
            depth: depth.max(1) as u64,
        };
        prefetch.top_up();
        prefetch
    }

    fn top_up(&mut self) {
        if let Some(Spawned {
            spawn,
            work,
            results,
        }) = &self.spawned
        {
            while self.issued < self.yielded + self.depth {
                let Some(job) = self.jobs.next() else { break };
                let (work, results, index) = (work.clone(), results.clone(), self.issued);
                spawn(Box::new(move || {
                    // The consumer dropped the prefetch: nobody wants the result.
                    let _ = results.send((index, work(job)));
                }));
                self.issued += 1;
            }
            return;
        }
        let Some(sender) = &self.to_workers else {
            return;
        };
        while self.issued < self.yielded + self.depth {
            let Some(job) = self.jobs.next() else { break };
            if sender.send((self.issued, job)).is_err() {
                break;
            }
            self.issued += 1;
        }
    }
}

impl<J: Send + 'static, T: Send + 'static> Iterator for Prefetch<J, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if let Some(work) = &self.inline {
            return self.jobs.next().map(|job| work(job));
        }
        if self.yielded == self.issued {
            return None;
        }
        let item = loop {
            if let Some(item) = self.waiting.remove(&self.yielded) {
                break item;
            }
            // A worker that panicked dropped its job: end rather than wait forever.
            let (index, item) = self.from_workers.recv().ok()?;
            self.waiting.insert(index, item);
        };
        self.yielded += 1;
        self.top_up();
        Some(item)
    }
}

impl<J, T> Drop for Prefetch<J, T> {
    fn drop(&mut self) {
        // Workers stop once the queue is closed; results still in flight are dropped.
        self.to_workers = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn results_come_in_job_order_whatever_order_workers_finish_in() {
        let out: Vec<u64> = Prefetch::new(0..50u64, 4, 8, |i| {
            std::thread::sleep(Duration::from_micros((50 - i) * 30));
            i * i
        })
        .collect();
        assert_eq!(out, (0..50u64).map(|i| i * i).collect::<Vec<_>>());
    }

    #[test]
    fn no_more_than_depth_results_exist_ahead_of_the_consumer() {
        let live = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        struct Item(Arc<AtomicUsize>);
        impl Drop for Item {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let (l, m) = (live.clone(), most.clone());
        let prefetch = Prefetch::new(0..200, 3, 5, move |_| {
            let now = l.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            Item(l.clone())
        });
        let mut taken = 0;
        for item in prefetch {
            std::thread::sleep(Duration::from_micros(200));
            drop(item);
            taken += 1;
        }
        assert_eq!(taken, 200);
        // `depth` ahead plus the one the consumer holds.
        assert!(
            most.load(Ordering::SeqCst) <= 6,
            "{} alive at once",
            most.load(Ordering::SeqCst)
        );
    }

    #[test]
    fn without_workers_each_job_runs_on_the_consumers_thread_when_taken() {
        let consumer = std::thread::current().id();
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        let mut prefetch = Prefetch::new(0..5u64, 0, 3, move |i| {
            assert_eq!(std::thread::current().id(), consumer);
            counter.fetch_add(1, Ordering::SeqCst);
            i * 10
        });
        // Nothing runs ahead: the job runs when its result is asked for.
        assert_eq!(ran.load(Ordering::SeqCst), 0);
        assert_eq!(prefetch.next(), Some(0));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        assert_eq!(prefetch.collect::<Vec<_>>(), vec![10, 20, 30, 40]);
    }

    #[test]
    fn spawned_jobs_come_in_job_order_and_no_more_than_depth_ahead() {
        let live = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let (l, m) = (live.clone(), most.clone());
        let spawn: Spawn = |job| {
            std::thread::spawn(job);
        };
        let prefetch = Prefetch::spawned(
            0..40u64,
            4,
            move |i| {
                let now = l.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros((40 - i) * 50));
                i * i
            },
            spawn,
        );
        let mut out = Vec::new();
        for i in prefetch {
            out.push(i);
            live.fetch_sub(1, Ordering::SeqCst);
        }
        assert_eq!(out, (0..40u64).map(|i| i * i).collect::<Vec<_>>());
        // `depth` ahead plus the one just taken.
        assert!(most.load(Ordering::SeqCst) <= 5, "{most:?} at once");
    }

    #[test]
    fn an_empty_job_list_yields_nothing() {
        let mut prefetch = Prefetch::new(std::iter::empty::<u32>(), 2, 4, |x| x);
        assert_eq!(prefetch.next(), None);
    }
}
