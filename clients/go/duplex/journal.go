package duplex

import (
	"fmt"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
)

// Journal keeps the numbered commands the server has not yet reported as applied, so a
// resume can send again exactly the ones it lost. The server applies each client_seq once
// and reports the last one it applied on every event (applied_client_seq).
type Journal struct {
	pending []*pb.ConverseRequest // client_seq contiguous from pending[0]
	lastSeq uint64                // the newest client_seq handed out
}

// Number gives req the next client_seq and keeps it until the server applies it.
func (j *Journal) Number(req *pb.ConverseRequest) uint64 {
	j.lastSeq++
	req.ClientSeq = j.lastSeq
	j.pending = append(j.pending, req)
	return j.lastSeq
}

// Trim forgets every command with client_seq up to applied.
func (j *Journal) Trim(applied uint64) {
	n := 0
	for n < len(j.pending) && j.pending[n].GetClientSeq() <= applied {
		n++
	}
	j.pending = j.pending[n:]
}

// After returns the commands to resend to a server that applied up to applied. A server
// that claims more than was ever numbered here is not the session this journal belongs to.
func (j *Journal) After(applied uint64) ([]*pb.ConverseRequest, error) {
	if applied > j.lastSeq {
		return nil, fmt.Errorf("server applied client_seq %d, beyond the newest command sent (%d)", applied, j.lastSeq)
	}
	j.Trim(applied)
	return append([]*pb.ConverseRequest(nil), j.pending...), nil
}

// Len says how many commands wait for the server's confirmation.
func (j *Journal) Len() int { return len(j.pending) }

// Cursor is the last journaled event received: where a resume asks the replay to start, and
// the filter that drops the duplicates a replay can bring.
type Cursor struct {
	LastSeq uint64
}

// Admit says whether an event numbered seq is new. Events numbered 0 are never replayed,
// so each is new; a seq that skips ahead means the server lost events, which is an error.
func (c *Cursor) Admit(seq uint64) (bool, error) {
	switch {
	case seq == 0:
		return true, nil
	case seq <= c.LastSeq:
		return false, nil
	case seq != c.LastSeq+1:
		return false, fmt.Errorf("event seq %d follows %d: events were lost", seq, c.LastSeq)
	}
	c.LastSeq = seq
	return true, nil
}
