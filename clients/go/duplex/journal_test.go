package duplex

import (
	"testing"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
)

func appendCommand() *pb.ConverseRequest {
	return &pb.ConverseRequest{Command: &pb.ConverseRequest_AppendInputAudio{
		AppendInputAudio: &pb.AppendInputAudio{Audio: []byte{0, 0}},
	}}
}

func seqs(reqs []*pb.ConverseRequest) []uint64 {
	var out []uint64
	for _, req := range reqs {
		out = append(out, req.GetClientSeq())
	}
	return out
}

func TestJournalResendsExactlyTheUnappliedCommands(t *testing.T) {
	var j Journal
	for want := uint64(1); want <= 5; want++ {
		if got := j.Number(appendCommand()); got != want {
			t.Fatalf("Number gave %d, want %d", got, want)
		}
	}
	j.Trim(2)
	lost, err := j.After(3)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqs(lost); len(got) != 2 || got[0] != 4 || got[1] != 5 {
		t.Fatalf("resend %v, want [4 5]", got)
	}
	if lost, _ := j.After(5); len(lost) != 0 || j.Len() != 0 {
		t.Fatalf("after everything applied: resend %v, %d kept", seqs(lost), j.Len())
	}
	if j.Number(appendCommand()) != 6 {
		t.Fatal("numbering must go on across resumes")
	}
}

func TestJournalRefusesAServerAheadOfIt(t *testing.T) {
	var j Journal
	j.Number(appendCommand())
	if _, err := j.After(2); err == nil {
		t.Fatal("a server that applied a command never sent is not this session")
	}
}

func TestCursorDropsDuplicatesAndRefusesGaps(t *testing.T) {
	c := Cursor{LastSeq: 3}
	cases := []struct {
		seq   uint64
		fresh bool
		fails bool
	}{
		{seq: 0, fresh: true}, // unnumbered events are never replayed
		{seq: 2},              // replayed: seen before
		{seq: 3},
		{seq: 4, fresh: true},
		{seq: 6, fails: true},
	}
	for _, tc := range cases {
		fresh, err := c.Admit(tc.seq)
		if fresh != tc.fresh || (err != nil) != tc.fails {
			t.Fatalf("Admit(%d) = %v, %v", tc.seq, fresh, err)
		}
	}
	if c.LastSeq != 4 {
		t.Fatalf("cursor at %d, want 4", c.LastSeq)
	}
}
