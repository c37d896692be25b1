// Package reconcile decides what to run and when. It is level-based: a
// change marks a task dirty, the buffer period holds it, and a worker then
// reads the current results of all the task's queries, builds the module
// inputs with a pure function, and skips the run when the desired state's
// fingerprint equals the one last applied.
//
// The Controller has three parts (docs/architecture.md draws them):
//
//   - the queue: workQueue (queue.go), the names of the tasks due to run
//     and the run slots, and each task's lifecycle state, entry.lc
//     (lifecycle.go: the phase, the run that is due, the timer, the
//     failures). transition is the table of the lifecycle; only
//     lifecycle.go writes entry.lc.
//   - the reconciler (reconciler.go): one run of one task from a Request
//     (desired.go, inputs.go, chain.go's upstream check, the driver, the
//     record in the store), without state of its own: it returns an
//     outcome, which the Controller applies to the task's state.
//   - management: the notifications and trigger rules (notes.go), the API's
//     operations (manage.go), -once (once.go), drift checks (drift.go),
//     schedules (schedule.go), chains (chain.go), high availability
//     (controller.go's SetActive, owned.go). They move tasks by lifecycle
//     events and wait for states; -once hands its runs to the queue, and
//     the API's runs and approvals, drift checks and destroys are handed
//     to its workers (handOff).
package reconcile
