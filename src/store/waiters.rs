//! Waiting for a task (or a run) to change: a list of waiters per task,
//! woken each time a change of it is applied (and flushed). A waiter reads the task
//! afterwards and waits for the flush before showing it, like every reader.
//!
//! A wake that comes while a waiter is between reads is kept for it (a
//! [`Notify`] permit), so a change is never missed between a read and the
//! next wait.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;

use crate::envelope::TaskId;

/// Who waits for which task.
#[derive(Default, Clone)]
pub(crate) struct Watchers {
    waiting: Arc<Mutex<HashMap<TaskId, Vec<Arc<Waiter>>>>>,
}

/// One waiter: woken at each change, and told when the task has ended.
#[derive(Default)]
struct Waiter {
    notify: Notify,
    ended: AtomicBool,
}

impl Watchers {
    /// A wait for `task`'s changes, registered now.
    pub(crate) fn watch(&self, task: TaskId) -> Watch {
        let waiter = Arc::new(Waiter::default());
        self.lock()
            .entry(task)
            .or_default()
            .push(Arc::clone(&waiter));
        Watch {
            task,
            waiter,
            watchers: self.clone(),
        }
    }

    /// Wakes everyone waiting for `task`: it just changed, and `ended`
    /// says whether it can change no more.
    pub(crate) fn wake(&self, task: TaskId, ended: bool) {
        let waiting = self.lock();
        if let Some(list) = waiting.get(&task) {
            for waiter in list {
                if ended {
                    waiter.ended.store(true, Ordering::Release);
                }
                waiter.notify.notify_one();
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Vec<Arc<Waiter>>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One registered wait; dropping it unregisters it.
pub struct Watch {
    task: TaskId,
    waiter: Arc<Waiter>,
    watchers: Watchers,
}

impl Watch {
    /// Resolves at the task's next change since the last call (or since
    /// the wait was registered).
    pub async fn changed(&mut self) {
        self.waiter.notify.notified().await;
    }

    /// Resolves once a change that ended the task was applied after the
    /// wait was registered.
    pub async fn ended(&mut self) {
        while !self.waiter.ended.load(Ordering::Acquire) {
            self.waiter.notify.notified().await;
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut waiting = self.watchers.lock();
        if let Some(list) = waiting.get_mut(&self.task) {
            list.retain(|w| !Arc::ptr_eq(w, &self.waiter));
            if list.is_empty() {
                waiting.remove(&self.task);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_reaches_every_waiter_and_is_kept_until_waited_for() {
        let watchers = Watchers::default();
        let task = TaskId::new();
        let mut a = watchers.watch(task);
        let mut b = watchers.watch(task);
        let gone = watchers.watch(task);
        drop(gone);
        assert_eq!(watchers.lock()[&task].len(), 2);
        // Woken before either waits: the wake is kept for both.
        watchers.wake(task, false);
        a.changed().await;
        b.changed().await;
        // Ended: each sees the second change, and the end.
        watchers.wake(task, true);
        a.changed().await;
        b.ended().await;
        a.ended().await;
        drop((a, b));
        assert!(watchers.lock().is_empty());
        let never = watchers.watch(TaskId::new());
        drop(never);
        assert!(watchers.lock().is_empty(), "a dropped wait is unregistered");
    }
}
