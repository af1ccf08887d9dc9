package duplex

import (
	"testing"

	"github.com/golang/protobuf/proto"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

func TestRouteOfTakesTheFirstKeyFound(t *testing.T) {
	trailers := metadata.Pairs()
	headers := metadata.Pairs(RouteHeader, "r2")
	if got := routeOf(trailers, headers); got != "r2" {
		t.Fatalf("routeOf = %q, want r2", got)
	}
	if got := routeOf(metadata.Pairs(RouteHeader, "r1"), headers); got != "r1" {
		t.Fatalf("routeOf = %q, want r1 (the trailers first)", got)
	}
	if got := routeOf(trailers); got != "" {
		t.Fatalf("routeOf = %q, want none", got)
	}
}

func TestACancelledStreamReadsTheRefusalFromItsHeaders(t *testing.T) {
	refusal, err := proto.Marshal(&spb.Status{Code: int32(codes.Unavailable), Message: "the session lives on another replica"})
	if err != nil {
		t.Fatal(err)
	}
	headers := metadata.Pairs(RefusalHeader, string(refusal))
	got := relayedRefusal(status.Error(codes.Canceled, "stream reset"), headers)
	if s := status.Convert(got); s.Code() != codes.Unavailable || s.Message() != "the session lives on another replica" {
		t.Fatalf("relayed = %v, want the UNAVAILABLE refusal", got)
	}
	// Only a CANCELLED status is replaced, and only by a refusal that is there.
	other := status.Error(codes.NotFound, "unknown session")
	if relayedRefusal(other, headers) != other {
		t.Fatal("a status that arrived whole was replaced")
	}
	cancelled := status.Error(codes.Canceled, "stream reset")
	if relayedRefusal(cancelled, metadata.MD{}) != cancelled {
		t.Fatal("a CANCELLED status without a refusal in the headers was replaced")
	}
}
