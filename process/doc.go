// Package process holds the AgentProcess record, its state machine and the
// completion review of gated images.
//
// Both are pure cores: no I/O, no clock, no randomness. Step computes the next
// record from the current one and an input; the kernel persists the result in
// the same batch as the effect that caused it. The review functions compute
// the review token, decode and validate completion evidence, and decide whether
// a gated process_exit may end the process; the kernel supplies the facts (goal
// identity, Human message statuses, observed tool names) and commits the exit.
//
// States:
//
//	created --admit--> runnable --dispatch--> running --exit--> exited
//	                      ^  <------yield------  |
//	                      |  <-----recover-----  |
//	                      +-------wake------- waiting <--block--+
//
// pause takes created, runnable or waiting to paused and resume returns to the
// state paused from (a wait is kept while paused, and a wake that arrives while
// paused is recorded so resume goes to runnable). fail and kill end any
// non-terminal state. Every transition increments the state generation Gen, so
// a wake-up computed from an older record is refused.
package process
