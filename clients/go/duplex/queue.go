package duplex

// An open that reaches a server at capacity may wait in its admission queue (see the
// SessionQueued message of the contract): the server answers session_queued, unnumbered and
// again each time the position or the estimate changes, then session_created once the
// session is admitted. The handshake timeout covers only the first answer, since a wait may
// last minutes. A wait cut in the transport is resumed with the wait's id and token
// (last_received_seq 0) on the replica its route names, which keeps its place. A refused wait
// comes first as an unnumbered error event, because a proxy may lose the stream's status.

import (
	"fmt"
	"time"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// OpenRefusedError is an open the server would not admit: its wait in the queue was refused.
type OpenRefusedError struct {
	Code       string        // the server's reason: queue_wait_exceeded or server_shutting_down
	Message    string        // the server's words
	RetryAfter time.Duration // when trying again may work; 0 when the server gave no hint
}

func (e *OpenRefusedError) Error() string {
	return fmt.Sprintf("the server refused the session: %s (retry after %v): %s", e.Code, e.RetryAfter, e.Message)
}

// waitRefusals are the codes of the unnumbered error events that end a wait in the queue.
var waitRefusals = map[string]bool{"queue_wait_exceeded": true, "server_shutting_down": true}

// waitRefusal returns the refusal that event carries, nil when it carries none.
func waitRefusal(event *pb.ConverseResponse) *OpenRefusedError {
	report := event.GetError()
	if report == nil || event.GetSeq() != 0 || !waitRefusals[report.GetCode()] {
		return nil
	}
	return &OpenRefusedError{
		Code:       report.GetCode(),
		Message:    report.GetMessage(),
		RetryAfter: report.GetRetryAfter().AsDuration(),
	}
}

// cutWhileWaiting says whether a wait's stream failed in the transport (resume the wait)
// rather than by the server's decision (the wait is over).
func cutWhileWaiting(err error) bool {
	s, ok := status.FromError(err)
	if !ok {
		return false // io.EOF: the server ended the stream, it was not cut
	}
	switch s.Code() {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded, codes.Aborted,
		codes.Internal, codes.Unknown:
		return true
	}
	return false
}

// waitInQueue follows a wait from its first session_queued (reply) to the answer that ends
// it: session_created, session_resumed when the session was admitted just as a cut wait was
// resumed, or the refusal. It returns that answer's stream, the first notice (the wait's id
// and token) and the answer.
func (c *Client) waitInQueue(att *attachment, reply *pb.ConverseResponse) (*attachment, *pb.SessionQueued, *pb.ConverseResponse, error) {
	wait := reply.GetSessionQueued() // later notices carry no token: keep the first
	for queued := wait; queued != nil; queued = reply.GetSessionQueued() {
		c.learnRoute(queued.GetRoute())
		if c.opts.OnQueued != nil {
			c.opts.OnQueued(queued)
		}
		next, err := att.stream.Recv() // no timer: the server decides how long a wait lasts
		if err == nil {
			reply = next
			continue
		}
		err = c.refused(att.stream, err)
		att.cancel()
		if !cutWhileWaiting(err) {
			return nil, nil, nil, fmt.Errorf("the wait in the queue ended: %w", err)
		}
		if att, reply, err = c.resumeWait(wait); err != nil {
			return nil, nil, nil, err
		}
	}
	return att, wait, reply, nil
}

// resumeWait takes a cut wait back, with the backoff between attempts.
func (c *Client) resumeWait(wait *pb.SessionQueued) (*attachment, *pb.ConverseResponse, error) {
	resume := &pb.ConverseRequest{Command: &pb.ConverseRequest_ResumeSession{
		ResumeSession: &pb.ResumeSession{SessionId: wait.GetSessionId(), ResumeToken: wait.GetResumeToken()},
	}}
	var last error
	for attempt := 1; attempt <= c.opts.Backoff.MaxAttempts; attempt++ {
		time.Sleep(c.opts.Backoff.Delay(attempt, c.rng))
		att, reply, err := c.handshake(resume)
		if err == nil {
			return att, reply, nil
		}
		if permanent(err) {
			return nil, nil, fmt.Errorf("resume the wait of %s: %w", wait.GetSessionId(), err)
		}
		last = err
	}
	return nil, nil, fmt.Errorf("resume the wait of %s: gave up after %d attempts: %w", wait.GetSessionId(), c.opts.Backoff.MaxAttempts, last)
}
