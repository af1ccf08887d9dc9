package duplex

// duplex.Open against a scripted in-process server (bufconn): the notices reported, a wait
// that outlasts the handshake timeout, a cut wait resumed with its id, token and route, and
// a refused wait typed.

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
)

const testHandshakeTimeout = 2 * time.Second

// script answers one Converse call, after the server read its first request.
type script func(stream pb.DuplexService_ConverseServer) error

// scriptedServer gives each Converse call the next script and records what each call sent.
type scriptedServer struct {
	pb.UnimplementedDuplexServiceServer
	mu      sync.Mutex
	scripts []script
	firsts  []*pb.ConverseRequest
	routes  []string // the x-omni-route of each call
}

func (s *scriptedServer) Converse(stream pb.DuplexService_ConverseServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	md, _ := metadata.FromIncomingContext(stream.Context())
	s.mu.Lock()
	s.firsts = append(s.firsts, first)
	s.routes = append(s.routes, routeOf(md))
	if len(s.scripts) == 0 {
		s.mu.Unlock()
		return status.Error(codes.NotFound, "no session here")
	}
	next := s.scripts[0]
	s.scripts = s.scripts[1:]
	s.mu.Unlock()
	return next(stream)
}

// openAgainst opens a session on a server running scripts; the positions it was told go to
// notices. The test's cleanup stops the client and the server.
func openAgainst(t *testing.T, notices *[]uint32, scripts ...script) (*Client, *scriptedServer, error) {
	t.Helper()
	listener := bufconn.Listen(1 << 20)
	fake := &scriptedServer{scripts: scripts}
	server := grpc.NewServer()
	pb.RegisterDuplexServiceServer(server, fake)
	go server.Serve(listener)
	dial := func(context.Context, string) (net.Conn, error) { return listener.Dial() }
	conn, err := grpc.Dial("bufnet", grpc.WithContextDialer(dial), grpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	client, err := Open(conn, &pb.SessionConfig{}, Options{
		HandshakeTimeout: testHandshakeTimeout,
		Backoff:          Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, MaxAttempts: 5},
		OnQueued:         func(q *pb.SessionQueued) { *notices = append(*notices, q.GetPosition()) },
	})
	t.Cleanup(func() {
		if client != nil {
			ended, cancel := context.WithCancel(context.Background())
			cancel() // no close handshake: only stop reading and resuming
			client.Close(ended)
		}
		conn.Close()
		server.Stop()
	})
	return client, fake, err
}

func queuedEvent(position uint32, token, route string) *pb.ConverseResponse {
	return &pb.ConverseResponse{Event: &pb.ConverseResponse_SessionQueued{SessionQueued: &pb.SessionQueued{
		SessionId: "s1", ResumeToken: token, Position: position, PriorityClass: "default", Route: route,
	}}}
}

var createdEvent = &pb.ConverseResponse{Seq: 1, Event: &pb.ConverseResponse_SessionCreated{
	SessionCreated: &pb.SessionCreated{Session: &pb.Session{Id: "s1"}, ResumeToken: "t2"},
}}

// admitted sends the notices, then session_created, and holds the stream until the client goes.
func admitted(notices ...*pb.ConverseResponse) script {
	return func(stream pb.DuplexService_ConverseServer) error {
		for _, event := range append(notices, createdEvent) {
			if event == nil {
				time.Sleep(testHandshakeTimeout * 3 / 2) // past the timeout: the wait must not be cut
				continue
			}
			if err := stream.Send(event); err != nil {
				return err
			}
		}
		<-stream.Context().Done()
		return nil
	}
}

func TestAQueuedOpenReportsEachNoticeAndOutlastsTheHandshakeTimeout(t *testing.T) {
	var notices []uint32
	client, fake, err := openAgainst(t, &notices, admitted(queuedEvent(2, "t1", ""), queuedEvent(1, "", ""), nil))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if client.SessionID != "s1" || len(notices) != 2 || notices[0] != 2 || notices[1] != 1 {
		t.Fatalf("session %q, notices %v; want s1, [2 1]", client.SessionID, notices)
	}
	if len(fake.firsts) != 1 {
		t.Fatalf("%d calls, want 1: the wait was cut", len(fake.firsts))
	}
}

func TestACutWaitIsResumedWithItsIDAndTokenOnItsRoute(t *testing.T) {
	var notices []uint32
	cut := func(stream pb.DuplexService_ConverseServer) error {
		if err := stream.Send(queuedEvent(3, "t1", "r9")); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "cut")
	}
	client, fake, err := openAgainst(t, &notices, cut, admitted(queuedEvent(1, "", "r9")))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if client.SessionID != "s1" || len(notices) != 2 || notices[1] != 1 {
		t.Fatalf("session %q, notices %v; want s1, [3 1]", client.SessionID, notices)
	}
	resume := fake.firsts[1].GetResumeSession()
	if resume.GetSessionId() != "s1" || resume.GetResumeToken() != "t1" || resume.GetLastReceivedSeq() != 0 {
		t.Fatalf("the wait was resumed with %v", resume)
	}
	if fake.routes[1] != "r9" {
		t.Fatalf("the resume went with route %q, want r9", fake.routes[1])
	}
}

func TestARefusedWaitIsAnOpenRefusedErrorWithItsCodeAndDelay(t *testing.T) {
	var notices []uint32
	refuse := func(stream pb.DuplexService_ConverseServer) error {
		if err := stream.Send(queuedEvent(1, "t1", "")); err != nil {
			return err
		}
		if err := stream.Send(&pb.ConverseResponse{Event: &pb.ConverseResponse_Error{Error: &pb.ErrorReport{
			Code: "queue_wait_exceeded", RetryAfter: durationpb.New(2 * time.Second),
		}}}); err != nil {
			return err
		}
		return status.Error(codes.ResourceExhausted, "queue_wait_exceeded")
	}
	_, _, err := openAgainst(t, &notices, refuse)
	var refused *OpenRefusedError
	if !errors.As(err, &refused) {
		t.Fatalf("Open: %v, want an *OpenRefusedError", err)
	}
	if refused.Code != "queue_wait_exceeded" || refused.RetryAfter != 2*time.Second || len(notices) != 1 {
		t.Fatalf("refused %+v after notices %v", refused, notices)
	}
}
