// Package reconcile decides what to run and when. It is level-based: a
// change marks a task dirty, the buffer period holds it, and a worker then
// reads the current results of all the task's queries, builds the module
// inputs with a pure function, and skips the run when the desired state's
// fingerprint equals the one last applied.
//
// One road leads to Terraform. Whoever wants something of a task records
// it on the task and pushes the task's name on the one queue: the
// lifecycle (lifecycle.go: transition, stepLocked) makes a task due (a
// change, a buffer period, a retry, a schedule tick, an upstream task),
// and a caller records a request, an intent with a generation (run now,
// create with run, inspect, a drift check, an approval, a deletion's
// destroy, -once: submitLocked). A worker (queue.go) takes a name and the
// task's intent or due run, and the reconciler (reconciler.go,
// Reconcile(ctx, name)) reads the task's snapshot (a job) through the
// table's one read-only function, decides and drives it without asking
// the controller anything; its Result is committed by the one applier
// (commitLocked) under the controller's lock. A caller that waits
// waits until the task observes its request's generation, and gets what
// the job did.
//
// The parts (docs/architecture.md): the Controller is the package's face;
// the task table (taskTable: the one lock, the tasks and their lifecycle,
// the queue of names) owns the state; the workers (queue.go) take names,
// asking high availability's ownership there and nowhere else; the
// reconciler decides and drives a job; the gate keeper (gates.go) keeps
// held plans; the sources (notes.go, drift.go, schedule.go) make tasks due
// or record requests.
package reconcile
