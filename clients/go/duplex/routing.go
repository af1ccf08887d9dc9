package duplex

// Behind a proxy in front of several replicas (docs/deploy.md), a session's later calls must
// reach the replica that holds it: the server names it (its routing key, in session_created,
// session_resumed and the response headers), and the client sends the key back as metadata
// on every call. A replica that refuses a resume because the session lives elsewhere names
// the owner the same way, and puts its refusal in the response headers too, because HAProxy
// 2.6 turns such a stream into CANCELLED and its trailers are lost.

import (
	"github.com/golang/protobuf/proto"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	// RouteHeader carries the routing key of the replica holding a session, both ways.
	RouteHeader = "x-omni-route"
	// RefusalHeader carries a refused stream's google.rpc.Status in the response headers.
	RefusalHeader = "x-omni-refusal-bin"
)

// routeOf returns the first routing key in mds, "" when none holds one.
func routeOf(mds ...metadata.MD) string {
	for _, md := range mds {
		if values := md.Get(RouteHeader); len(values) > 0 && values[0] != "" {
			return values[0]
		}
	}
	return ""
}

// relayedRefusal returns the refusal the server also put in headers when err is a CANCELLED
// status (a proxy lost the trailers); otherwise, or when headers hold none, err itself.
func relayedRefusal(err error, headers metadata.MD) error {
	if status.Code(err) != codes.Canceled {
		return err
	}
	values := headers.Get(RefusalHeader)
	if len(values) == 0 {
		return err
	}
	var relayed spb.Status
	if proto.Unmarshal([]byte(values[0]), &relayed) != nil || relayed.GetCode() == 0 {
		return err
	}
	return status.ErrorProto(&relayed)
}

// Route returns the routing key of the replica holding the session, "" while none is known.
func (c *Client) Route() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.route
}

// learnRoute keeps route as the session's routing key, when it names one.
func (c *Client) learnRoute(route string) {
	if route == "" {
		return
	}
	c.mu.Lock()
	c.route = route
	c.mu.Unlock()
}
