package duplex

import (
	"context"
	"errors"
	"fmt"
	"time"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// attachment is one Converse stream and the means to end it; a cancelled attachment's
// reads fail at once, which is how a failed write hands recovery to the reader.
type attachment struct {
	stream pb.DuplexService_ConverseClient
	cancel context.CancelFunc
}

// ErrResyncRequired means the server cannot replay the missed events: the session must be
// opened anew.
var ErrResyncRequired = errors.New("the server cannot replay the missed events (resync_required)")

// handshake opens a Converse stream, writes first, and reads the server's first event
// within the handshake timeout.
func (c *Client) handshake(first *pb.ConverseRequest) (*attachment, *pb.ConverseResponse, error) {
	ctx, cancel := context.WithCancel(context.Background())
	if c.opts.APIKey != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.opts.APIKey)
	}
	if route := c.Route(); route != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, RouteHeader, route) // to the session's replica
	}
	att := &attachment{cancel: cancel}
	stream, err := c.api.Converse(ctx)
	if err != nil {
		cancel()
		return nil, nil, err
	}
	att.stream = stream
	if sendErr := stream.Send(first); sendErr != nil {
		// Send reports only io.EOF; the stream's status comes from Recv.
		if _, err := stream.Recv(); err != nil {
			sendErr = c.refused(stream, err)
		}
		cancel()
		return nil, nil, sendErr
	}
	timer := time.AfterFunc(c.opts.HandshakeTimeout, cancel)
	reply, err := stream.Recv()
	if !timer.Stop() && err == nil {
		err = status.Error(codes.DeadlineExceeded, "no answer to the handshake in time")
	}
	if err != nil {
		err = c.refused(stream, err)
		cancel()
		return nil, nil, err
	}
	if headers, err := stream.Header(); err == nil {
		c.learnRoute(routeOf(headers))
	}
	return att, reply, nil
}

// refused reads a stream the server ended at the handshake: the replica it named as the
// session's (its retry goes there), and the refusal itself, from the headers when a proxy
// turned the stream into CANCELLED.
func (c *Client) refused(stream pb.DuplexService_ConverseClient, err error) error {
	headers, _ := stream.Header() // the stream is over: this does not wait
	c.learnRoute(routeOf(stream.Trailer(), headers))
	return relayedRefusal(err, headers)
}

// resume asks for the session back from the cursor. It returns the new stream and its
// session_resumed event, or an error that says whether trying again can help.
func (c *Client) resume(sessionID, token string, lastSeq uint64) (*attachment, *pb.ConverseResponse, error) {
	att, reply, err := c.handshake(&pb.ConverseRequest{Command: &pb.ConverseRequest_ResumeSession{
		ResumeSession: &pb.ResumeSession{SessionId: sessionID, ResumeToken: token, LastReceivedSeq: lastSeq},
	}})
	if err != nil {
		return nil, nil, err
	}
	switch reply.Event.(type) {
	case *pb.ConverseResponse_SessionResumed:
		return att, reply, nil
	case *pb.ConverseResponse_ResyncRequired:
		att.cancel()
		return nil, nil, ErrResyncRequired
	default:
		att.cancel()
		return nil, nil, fmt.Errorf("resume answered with %T, not session_resumed", reply.Event)
	}
}

// permanent says whether a failed resume can never succeed by trying again: the session
// is gone or was never ours, the request is wrong, or the server cannot replay.
func permanent(err error) bool {
	if errors.Is(err, ErrResyncRequired) {
		return true
	}
	s, ok := status.FromError(err)
	if !ok {
		return true // not a gRPC status: a protocol error of ours or the server's
	}
	switch s.Code() {
	case codes.NotFound, codes.FailedPrecondition, codes.InvalidArgument,
		codes.Unauthenticated, codes.PermissionDenied:
		return true
	}
	return false
}
