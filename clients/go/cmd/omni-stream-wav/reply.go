package main

import (
	"errors"
	"fmt"
	"io"
	"sync"

	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
	"github.com/omni-grpc/omni-grpc/clients/go/wav"
	"google.golang.org/protobuf/encoding/protojson"
)

// defaultReplyRateHz is the service's output rate, used until a delta names its own.
const defaultReplyRateHz = 24000

// reply follows the session's events: prints each, keeps the answer's audio, and says when
// the answer is complete.
type reply struct {
	out      io.Writer
	answered chan struct{} // closed at the first response_done, or at a failure
	done     chan struct{} // closed when the events end
	once     sync.Once

	mu       sync.Mutex
	pcm      []byte
	rateHz   uint32
	complete bool // response_done arrived
	failure  string
}

func newReply(out io.Writer) *reply {
	return &reply{out: out, answered: make(chan struct{}), done: make(chan struct{}), rateHz: defaultReplyRateHz}
}

func (r *reply) follow(events <-chan *pb.ConverseResponse) {
	defer close(r.done)
	defer r.finish("") // the events ended: nothing more will come to wait for
	for event := range events {
		line, err := protojson.Marshal(event)
		if err != nil {
			r.finish(fmt.Sprintf("cannot print an event: %v", err))
			continue
		}
		fmt.Fprintf(r.out, "%s\n", line)
		switch e := event.Event.(type) {
		case *pb.ConverseResponse_OutputAudioDelta:
			r.keep(e.OutputAudioDelta)
		case *pb.ConverseResponse_ResponseDone:
			r.mu.Lock()
			r.complete = true
			r.mu.Unlock()
			r.finish("")
		case *pb.ConverseResponse_Error:
			// A refused command means the turn the server heard is not the file.
			r.finish(fmt.Sprintf("the server refused a command: %s: %s", e.Error.GetCode(), e.Error.GetMessage()))
		}
	}
}

func (r *reply) keep(delta *pb.OutputAudioDelta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch delta.GetEncoding() {
	case pb.AudioEncoding_AUDIO_ENCODING_PCM16, pb.AudioEncoding_AUDIO_ENCODING_UNSPECIFIED:
	default:
		r.setFailure(fmt.Sprintf("the server sent %s audio, not pcm16", delta.GetEncoding()))
		return
	}
	r.pcm = append(r.pcm, delta.GetAudio()...)
	if delta.GetSampleRateHz() != 0 {
		r.rateHz = delta.GetSampleRateHz()
	}
}

func (r *reply) finish(failure string) {
	if failure != "" {
		r.mu.Lock()
		r.setFailure(failure)
		r.mu.Unlock()
	}
	r.once.Do(func() { close(r.answered) })
}

func (r *reply) setFailure(failure string) {
	if r.failure == "" {
		r.failure = failure
	}
}

// outcome says why the answer is not usable, or nil when it is; call it once events ended.
func (r *reply) outcome() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.failure != "":
		return errors.New(r.failure)
	case !r.complete:
		return errors.New("the events ended before the answer was done")
	}
	return nil
}

func (r *reply) audio() wav.Audio {
	r.mu.Lock()
	defer r.mu.Unlock()
	return wav.Audio{PCM: r.pcm, RateHz: r.rateHz}
}
