// Package duplex is a resuming client for the omni.duplex.v1 Converse stream.
//
// A Client keeps one session attached across broken connections. It remembers the seq of
// the last journaled event it received and the numbered commands the server has not yet
// reported as applied. When the stream breaks it opens a new one with resume_session from
// that cursor, reads session_resumed, sends again exactly the commands above the server's
// applied_client_seq, and then a heartbeat, which tells the server the rotated resume token
// arrived. The caller sees one unbroken stream of events with no duplicates.
package duplex

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sync"
	"time"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
	"google.golang.org/grpc"
)

// Options tune a Client; zero values take the defaults.
type Options struct {
	APIKey           string        // sent as "authorization: Bearer <key>"
	Backoff          Backoff       // DefaultBackoff when zero
	AckEvery         int           // acknowledge after this many journaled events (16)
	ProbeEvery       int           // after this many unconfirmed commands, ask with a heartbeat (32)
	HandshakeTimeout time.Duration // for the first answer to open or resume, not a queue's wait (10 s)
	EventBuffer      int           // events held for a slow reader (256)
	Seed             int64         // for the backoff jitter; 0 takes the time
	// OnQueued hears each session_queued of an open that waits in the server's queue
	// (position, estimated wait, priority class); nil: the wait is silent.
	OnQueued func(*pb.SessionQueued)
}

func (o Options) withDefaults() Options {
	if o.Backoff == (Backoff{}) {
		o.Backoff = DefaultBackoff
	}
	if o.AckEvery <= 0 {
		o.AckEvery = 16
	}
	if o.ProbeEvery <= 0 {
		o.ProbeEvery = 32
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = 256
	}
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano()
	}
	return o
}

// Stats counts what the client did to keep the session attached.
type Stats struct {
	Reconnects int // resumed streams
	Resent     int // commands sent again after a resume
	Duplicates int // replayed events dropped because they had arrived before
}

// Client is one session, kept attached. Its methods may be called from several goroutines.
type Client struct {
	api    pb.DuplexServiceClient
	opts   Options
	rng    *rand.Rand
	events chan *pb.ConverseResponse
	done   chan struct{} // closed when the session's events end
	err    error         // why they ended; nil after a normal close

	// SessionID names the session; Created is the session_created event.
	SessionID string
	Created   *pb.SessionCreated

	mu         sync.Mutex // orders writes on the stream and guards the fields below
	att        *attachment
	token      string
	route      string // the routing key of the session's replica, sent back on each call
	journal    Journal
	cursor     Cursor
	unacked    int  // journaled events received since the last ack
	unprobed   int  // numbered commands sent since the last heartbeat
	closing    bool // Close was called: the session's end is expected
	stats      Stats
	terminated bool // the events ended, or Close gave up: no more writes or resumes
}

// Open opens a new session on conn with config and starts keeping it attached.
func Open(conn grpc.ClientConnInterface, config *pb.SessionConfig, opts Options) (*Client, error) {
	opts = opts.withDefaults()
	c := &Client{
		api:    pb.NewDuplexServiceClient(conn),
		opts:   opts,
		rng:    rand.New(rand.NewSource(opts.Seed)),
		events: make(chan *pb.ConverseResponse, opts.EventBuffer),
		done:   make(chan struct{}),
	}
	att, reply, err := c.handshake(&pb.ConverseRequest{Command: &pb.ConverseRequest_OpenSession{
		OpenSession: &pb.OpenSession{Config: config},
	}})
	var wait *pb.SessionQueued
	if err == nil && reply.GetSessionQueued() != nil {
		att, wait, reply, err = c.waitInQueue(att, reply)
	}
	if err != nil {
		return nil, fmt.Errorf("open session: %w", err)
	}
	if err := c.adopt(att, reply, wait); err != nil {
		att.cancel()
		return nil, fmt.Errorf("open session: %w", err)
	}
	go c.run(att)
	return c, nil
}

// adopt takes the stream that answered the open: session_created, or session_resumed when
// the session was admitted just as a cut wait was resumed (the wait's token resumes the
// session then, and the stream is the session's, as after a reconnect). A wait's refusal
// comes back as *OpenRefusedError.
func (c *Client) adopt(att *attachment, reply *pb.ConverseResponse, wait *pb.SessionQueued) error {
	if refusal := waitRefusal(reply); refusal != nil {
		return refusal
	}
	if created := reply.GetSessionCreated(); created != nil {
		c.SessionID, c.Created, c.token, c.att = created.GetSession().GetId(), created, created.GetResumeToken(), att
		c.learnRoute(created.GetRoute())
		c.events <- reply
		return nil
	}
	if wait == nil || reply.GetSessionResumed() == nil {
		return fmt.Errorf("answered with %T, not session_created", reply.Event)
	}
	c.SessionID = wait.GetSessionId()
	if err := c.attach(att, reply); err != nil {
		return err
	}
	c.events <- reply
	return nil
}

// Events delivers every event once, in order, across reconnects; it is closed when the
// session ends or the client gives up (see Err).
func (c *Client) Events() <-chan *pb.ConverseResponse { return c.events }

// Err says why Events closed: nil after the session closed at the client's request.
func (c *Client) Err() error {
	<-c.done
	return c.err
}

// Stats reports the reconnect work so far.
func (c *Client) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Send numbers a command, keeps it until the server applies it, and writes it when a
// stream is attached; while reconnecting it waits in the journal for the resume.
func (c *Client) Send(req *pb.ConverseRequest) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.terminated {
		return 0, errors.New("the session has ended")
	}
	seq := c.journal.Number(req)
	c.writeLocked(req)
	c.unprobed++
	if c.unprobed >= c.opts.ProbeEvery {
		// Without events the server never says what it applied: a heartbeat_ack will.
		c.writeLocked(heartbeat())
	}
	return seq, nil
}

// AppendAudio adds input audio in the session's input format.
func (c *Client) AppendAudio(pcm []byte) (uint64, error) {
	return c.Send(&pb.ConverseRequest{Command: &pb.ConverseRequest_AppendInputAudio{
		AppendInputAudio: &pb.AppendInputAudio{Audio: pcm},
	}})
}

// Commit seals the input into a user turn and asks for an answer at once.
func (c *Client) Commit() (uint64, error) {
	answer := true
	return c.Send(&pb.ConverseRequest{Command: &pb.ConverseRequest_CommitInputAudio{
		CommitInputAudio: &pb.CommitInputAudio{CreateResponse: &answer},
	}})
}

// Close closes the session and waits until its last event arrived or ctx ends. It returns
// nil when the session closed as asked, else why the events ended.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	if !c.terminated {
		c.closing = true
		req := &pb.ConverseRequest{Command: &pb.ConverseRequest_CloseSession{CloseSession: &pb.CloseSession{}}}
		c.journal.Number(req)
		c.writeLocked(req)
	}
	c.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		c.mu.Lock()
		c.terminated = true // the reader stops instead of resuming
		if c.att != nil {
			c.att.cancel()
		}
		c.mu.Unlock()
		return ctx.Err()
	}
}

func heartbeat() *pb.ConverseRequest {
	return &pb.ConverseRequest{Command: &pb.ConverseRequest_Heartbeat{Heartbeat: &pb.Heartbeat{}}}
}

// writeLocked writes on the attached stream, if any. A failed write only drops the stream:
// the journal still holds the command, and the reader resumes.
func (c *Client) writeLocked(req *pb.ConverseRequest) {
	if c.att == nil {
		return
	}
	if err := c.att.stream.Send(req); err != nil {
		c.att.cancel() // the reader's Recv fails at once and it reconnects
		c.att = nil
		return
	}
	if _, ok := req.Command.(*pb.ConverseRequest_Heartbeat); ok {
		c.unprobed = 0
	}
}
