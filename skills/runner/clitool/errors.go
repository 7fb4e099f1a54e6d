package clitool

import "errors"

// Sentinel errors of a call; Result.Err wraps exactly one of them.
var (
	// ErrInvalidRequest: the call cannot be made as asked (an input name that
	// normalizes to nothing or collides with another, an argument placeholder
	// that cannot be filled). Nothing was spawned.
	ErrInvalidRequest = errors.New("invalid cli-tool request")
	// ErrSpawn: the process could not be started (command not found, cwd
	// missing, not executable).
	ErrSpawn = errors.New("cli-tool process could not be started")
	// ErrExitStatus: the process exited with a non-zero code or was killed by
	// a signal the runtime did not send.
	ErrExitStatus = errors.New("cli-tool process failed")
	// ErrTimeout: the call outlived its timeout and its process group was
	// terminated.
	ErrTimeout = errors.New("cli-tool process timed out")
	// ErrAborted: the caller's context ended the call and its process group
	// was terminated.
	ErrAborted = errors.New("cli-tool call aborted")
	// ErrOutputRejected: the process succeeded but its stdout cannot be a text
	// or JSON result (truncated, not UTF-8, or left incomplete by a
	// descendant that escaped the process group).
	ErrOutputRejected = errors.New("cli-tool output rejected")
	// ErrInternal: the runtime failed around the process (temporary files,
	// pipes).
	ErrInternal = errors.New("cli-tool runtime failure")
)
