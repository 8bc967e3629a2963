//! Waiting for a task to end: a list of waiters per task, woken when its
//! terminal change is applied. A waiter reads the task afterwards and waits
//! for the flush before showing it, like every reader.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use crate::envelope::TaskId;

/// Who waits for which task.
#[derive(Default, Clone)]
pub(crate) struct Watchers {
    waiting: Arc<Mutex<HashMap<TaskId, Vec<oneshot::Sender<()>>>>>,
}

impl Watchers {
    /// A wait for `task`'s end, registered now.
    pub(crate) fn watch(&self, task: TaskId) -> Watch {
        let (tx, rx) = oneshot::channel();
        self.lock().entry(task).or_default().push(tx);
        Watch {
            task,
            rx,
            watchers: self.clone(),
        }
    }

    /// Wakes everyone waiting for `task` (it just ended).
    pub(crate) fn wake(&self, task: TaskId) {
        let woken = {
            let mut waiting = self.lock();
            if waiting.is_empty() {
                return;
            }
            waiting.remove(&task)
        };
        for tx in woken.into_iter().flatten() {
            let _ = tx.send(());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Vec<oneshot::Sender<()>>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One registered wait; dropping it unregisters it.
pub struct Watch {
    task: TaskId,
    rx: oneshot::Receiver<()>,
    watchers: Watchers,
}

impl Watch {
    /// Resolves when the task has ended (or the store was dropped).
    pub async fn ended(&mut self) {
        let _ = (&mut self.rx).await;
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.rx.close();
        let mut waiting = self.watchers.lock();
        if let Some(list) = waiting.get_mut(&self.task) {
            list.retain(|tx| !tx.is_closed());
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
    async fn a_wake_reaches_every_waiter_and_dropped_waits_leave_nothing() {
        let watchers = Watchers::default();
        let task = TaskId::new();
        let mut a = watchers.watch(task);
        let mut b = watchers.watch(task);
        let gone = watchers.watch(task);
        drop(gone);
        assert_eq!(watchers.lock()[&task].len(), 2);
        watchers.wake(task);
        a.ended().await;
        b.ended().await;
        assert!(watchers.lock().is_empty());
        let never = watchers.watch(TaskId::new());
        drop(never);
        assert!(watchers.lock().is_empty(), "a dropped wait is unregistered");
    }
}
