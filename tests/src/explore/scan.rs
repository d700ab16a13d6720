//! Patterns a generated schedule may contain (without running it): `--scan` picks the
//! seeds whose schedules hold a given seam, to run those on a real server.

use super::model::{Acquire, Kind, Step, OWNERS, TASKS};

/// Whether `steps` contain `pattern`: `reentry-across-kinds` (a task holds a reentrant
/// lock and a read or write lock of the same name and asks for the reentrant one again)
/// or `handoff-revoked` (a task of an owner waits for a reentrant lock another task of
/// that owner holds, the holder releases, the lock is force-unlocked, and a task of the
/// owner tries it with wait 0).
pub fn contains(steps: &[Step], pattern: &str) -> bool {
    match pattern {
        "reentry-across-kinds" => reentry_across_kinds(steps),
        "handoff-revoked" => handoff_revoked(steps),
        _ => false,
    }
}

fn stacks(steps: &[Step], mut each: impl FnMut(usize, &Step, &[Vec<Acquire>]) -> bool) -> bool {
    let mut st: Vec<Vec<Acquire>> = vec![Vec::new(); usize::from(OWNERS * TASKS)];
    for (i, s) in steps.iter().enumerate() {
        if each(i, s, &st) {
            return true;
        }
        match s {
            Step::Acquire(a) => st[usize::from(a.owner * TASKS + a.task)].push(a.clone()),
            Step::Release { owner, task } => {
                st[usize::from(owner * TASKS + task)].pop();
            }
            _ => {}
        }
    }
    false
}

fn reentry_across_kinds(steps: &[Step]) -> bool {
    let mut fault_on = false;
    stacks(steps, |_, s, st| {
        // Any fault before: the outer acquisitions may have failed.
        if matches!(
            s,
            Step::FaultBegin(_)
                | Step::KillClients
                | Step::ResetConnections { .. }
                | Step::DeleteKeys(_)
                | Step::DebugSleep(_)
        ) {
            fault_on = true;
        }
        let Step::Acquire(a) = s else { return false };
        let mine = &st[usize::from(a.owner * TASKS + a.task)];
        let outer = mine
            .iter()
            .position(|h| h.name == a.name && h.kind == Kind::Reentrant);
        let rw = mine
            .iter()
            .rposition(|h| h.name == a.name && matches!(h.kind, Kind::Read | Kind::Write));
        let plain = |h: &Acquire| h.drop_after_ms.is_none();
        a.kind == Kind::Reentrant
            && !fault_on
            && plain(a)
            && mine.iter().all(plain)
            && matches!((outer, rw), (Some(o), Some(r)) if o < r)
    })
}

fn handoff_revoked(steps: &[Step]) -> bool {
    // (owner, name) -> stage: 1 held and waited for by a sibling task, 2 released, 3 forced.
    let mut stage = std::collections::HashMap::new();
    stacks(steps, |_, s, st| {
        match s {
            Step::Acquire(a) if a.kind == Kind::Reentrant => {
                let st_key = (a.owner, a.name);
                let other_holds = (0..TASKS).any(|t| {
                    t != a.task
                        && st[usize::from(a.owner * TASKS + t)]
                            .iter()
                            .any(|h| h.name == a.name && h.kind == Kind::Reentrant)
                });
                let once = a.try_once || a.wait_ms == 0;
                if stage.get(&st_key) == Some(&3) && once {
                    return true;
                }
                if other_holds && !once {
                    stage.insert(st_key, 1);
                }
            }
            Step::Release { owner, task } => {
                let top = st[usize::from(owner * TASKS + task)].last();
                if let Some(h) = top.filter(|h| h.kind == Kind::Reentrant) {
                    if stage.get(&(*owner, h.name)) == Some(&1) {
                        stage.insert((*owner, h.name), 2);
                    }
                }
            }
            Step::ForceUnlock {
                name,
                kind: Kind::Reentrant,
                ..
            } => {
                for o in 0..OWNERS {
                    if stage.get(&(o, *name)) == Some(&2) {
                        stage.insert((o, *name), 3);
                    }
                }
            }
            _ => {}
        }
        false
    })
}
