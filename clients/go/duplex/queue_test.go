package duplex

import (
	"errors"
	"fmt"
	"testing"
	"time"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

func errorEvent(seq uint64, code string) *pb.ConverseResponse {
	return &pb.ConverseResponse{Seq: seq, Event: &pb.ConverseResponse_Error{Error: &pb.ErrorReport{
		Code: code, Message: "waited too long", RetryAfter: durationpb.New(1500 * time.Millisecond),
	}}}
}

func TestAnUnnumberedWaitRefusalIsTypedWithItsCodeAndDelay(t *testing.T) {
	refusal := waitRefusal(errorEvent(0, "queue_wait_exceeded"))
	if refusal == nil {
		t.Fatal("waitRefusal = nil, want the refusal")
	}
	if refusal.Code != "queue_wait_exceeded" || refusal.RetryAfter != 1500*time.Millisecond {
		t.Fatalf("refusal = %+v", refusal)
	}
	var typed *OpenRefusedError
	if !errors.As(fmt.Errorf("open session: %w", refusal), &typed) || typed != refusal {
		t.Fatal("a wrapped refusal is not found as *OpenRefusedError")
	}
}

func TestOtherEventsAreNoWaitRefusal(t *testing.T) {
	queued := &pb.ConverseResponse{Event: &pb.ConverseResponse_SessionQueued{SessionQueued: &pb.SessionQueued{Position: 1}}}
	for name, event := range map[string]*pb.ConverseResponse{
		"numbered error": errorEvent(3, "queue_wait_exceeded"),
		"other code":     errorEvent(0, "invalid_request"),
		"queued":         queued,
	} {
		if refusal := waitRefusal(event); refusal != nil {
			t.Errorf("%s: waitRefusal = %+v, want nil", name, refusal)
		}
	}
}

func TestAWaitIsResumedAfterACutNotAfterARefusal(t *testing.T) {
	for code, cut := range map[codes.Code]bool{
		codes.Unavailable: true, codes.Canceled: true, codes.Internal: true,
		codes.ResourceExhausted: false, codes.NotFound: false, codes.Unauthenticated: false,
	} {
		if got := cutWhileWaiting(status.Error(code, "x")); got != cut {
			t.Errorf("cutWhileWaiting(%v) = %v, want %v", code, got, cut)
		}
	}
	if cutWhileWaiting(errors.New("not a status")) {
		t.Error("a non-status error counts as a cut")
	}
}
