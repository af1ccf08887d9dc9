package duplex

import (
	"errors"
	"fmt"
	"time"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
)

// errEnded marks the session's terminal event: the events end without an error.
var errEnded = errors.New("session ended")

// ErrSessionReplaced means another stream resumed the session and took it over.
var ErrSessionReplaced = errors.New("another stream took the session over (session_replaced)")

// run reads the attached stream and, each time it breaks, resumes; it is the only reader.
func (c *Client) run(att *attachment) {
	var err error
	for {
		err = c.pump(att)
		att.cancel()
		if err != nil {
			break
		}
		if att, err = c.reconnect(); err != nil {
			break
		}
	}
	if errors.Is(err, errEnded) {
		err = nil
	}
	c.finish(err)
}

// finish ends the events with err; a session ended by someone else than the client is an
// error too.
func (c *Client) finish(err error) {
	c.mu.Lock()
	c.terminated = true
	if err == nil && !c.closing {
		err = errors.New("the server ended the session")
	}
	c.err = err
	c.att = nil
	c.mu.Unlock()
	close(c.events)
	close(c.done)
}

// pump reads one stream until it breaks (nil: reconnect) or the session is over (an error,
// errEnded for the terminal event).
func (c *Client) pump(att *attachment) error {
	for {
		event, err := att.stream.Recv()
		if err != nil {
			return nil
		}
		if err := c.receive(event); err != nil {
			return err
		}
		if _, ok := event.Event.(*pb.ConverseResponse_GoingAway); ok {
			return nil // the server drains: resume now, on a server that stays
		}
	}
}

// receive files one event: confirms commands, drops replayed duplicates, delivers the rest
// and acknowledges them in batches.
func (c *Client) receive(event *pb.ConverseResponse) error {
	c.mu.Lock()
	c.journal.Trim(event.GetAppliedClientSeq())
	fresh, err := c.cursor.Admit(event.GetSeq())
	if !fresh && err == nil {
		c.stats.Duplicates++
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if _, ok := event.Event.(*pb.ConverseResponse_SessionReplaced); ok {
		return ErrSessionReplaced
	}
	if !fresh {
		return nil
	}
	c.events <- event
	switch event.Event.(type) {
	case *pb.ConverseResponse_SessionClosed, *pb.ConverseResponse_SessionExpired:
		return errEnded
	}
	if event.GetSeq() > 0 {
		c.ackAfterDelivery()
	}
	return nil
}

func (c *Client) ackAfterDelivery() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unacked++
	if c.unacked < c.opts.AckEvery {
		return
	}
	c.unacked = 0
	c.writeLocked(&pb.ConverseRequest{Command: &pb.ConverseRequest_AckEvents{
		AckEvents: &pb.AckEvents{Seq: c.cursor.LastSeq},
	}})
}

// reconnect resumes the session from the cursor, with jittered backoff between tries, and
// attaches the new stream once the lost commands are sent again.
func (c *Client) reconnect() (*attachment, error) {
	var last error
	for attempt := 1; attempt <= c.opts.Backoff.MaxAttempts; attempt++ {
		time.Sleep(c.opts.Backoff.Delay(attempt, c.rng))
		c.mu.Lock()
		if c.terminated {
			c.mu.Unlock()
			return nil, errors.New("the client stopped")
		}
		token, lastSeq := c.token, c.cursor.LastSeq
		c.mu.Unlock()
		att, resumed, err := c.resume(c.SessionID, token, lastSeq)
		if err != nil {
			if permanent(err) {
				return nil, fmt.Errorf("resume session %s: %w", c.SessionID, err)
			}
			last = err
			continue
		}
		err = c.attach(att, resumed)
		if err == nil {
			c.events <- resumed // before the replay that the reader reads next
			return att, nil
		}
		att.cancel()
		if !errors.Is(err, errWriteFailed) {
			return nil, err
		}
		last = err
	}
	return nil, fmt.Errorf("resume session %s: gave up after %d attempts: %w", c.SessionID, c.opts.Backoff.MaxAttempts, last)
}

var errWriteFailed = errors.New("the resumed stream broke during the resend")

// attach takes the resumed stream: the new token, the commands the server did not apply
// (in their original numbers), then a heartbeat, so the server's first read on this stream
// proves the rotated token arrived even when nothing was lost.
func (c *Client) attach(att *attachment, resumed *pb.ConverseResponse) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	lost, err := c.journal.After(resumed.GetAppliedClientSeq())
	if err != nil {
		return err
	}
	c.token = resumed.GetSessionResumed().GetResumeToken()
	if route := resumed.GetSessionResumed().GetRoute(); route != "" {
		c.route = route // an adopted session names its new replica
	}
	for _, req := range append(lost, heartbeat()) {
		if err := att.stream.Send(req); err != nil {
			return errWriteFailed
		}
	}
	c.att = att
	c.unprobed = 0
	c.stats.Reconnects++
	c.stats.Resent += len(lost)
	return nil
}
