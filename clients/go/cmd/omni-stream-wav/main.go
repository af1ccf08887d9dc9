// Command omni-stream-wav says a WAV file to an omni-grpc server over one resuming session:
// it streams the audio in chunks, commits the turn and asks for an answer, prints every
// event as one line of JSON (protojson), and saves the answer's audio as a WAV file. A
// broken connection is resumed where it broke; the output shows it only as session_resumed.
//
//	omni-stream-wav --target HOST:PORT --api-key KEY --wav in.wav --out reply.wav
//
// On a server at capacity with a queue, each session_queued goes to stderr as "queued:
// position N, ..."; a refused wait exits with status 3 after "refused: CODE, retry after N ms".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/omni-grpc/omni-grpc/clients/go/duplex"
	pb "github.com/omni-grpc/omni-grpc/clients/go/gen/omni/duplex/v1"
	"github.com/omni-grpc/omni-grpc/clients/go/wav"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

type settings struct {
	target, apiKey, wavPath, outPath, caFile string
	tls, realtime                            bool
	chunkMS                                  int
	timeout                                  time.Duration
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parse(args []string, stderr io.Writer) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("omni-stream-wav", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&s.target, "target", "127.0.0.1:50051", "server address, HOST:PORT")
	fs.StringVar(&s.apiKey, "api-key", os.Getenv("OMNI_GRPC_API_KEY"), "bearer key (default $OMNI_GRPC_API_KEY)")
	fs.StringVar(&s.wavPath, "wav", "", "input: mono 16-bit PCM WAV (required)")
	fs.StringVar(&s.outPath, "out", "", "where to save the reply audio as WAV")
	fs.BoolVar(&s.tls, "tls", false, "connect with TLS (system roots unless --ca)")
	fs.StringVar(&s.caFile, "ca", "", "PEM file of the CA to trust (implies --tls)")
	fs.BoolVar(&s.realtime, "realtime", false, "send at the audio's own pace, like a microphone")
	fs.IntVar(&s.chunkMS, "chunk-ms", 100, "audio per append, in milliseconds")
	fs.DurationVar(&s.timeout, "timeout", 60*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if s.wavPath == "" || s.chunkMS <= 0 {
		return s, errors.New("--wav is required and --chunk-ms must be positive")
	}
	return s, nil
}

func dial(s settings) (*grpc.ClientConn, error) {
	security := grpc.WithInsecure()
	if s.tls || s.caFile != "" {
		creds := credentials.NewClientTLSFromCert(nil, "")
		if s.caFile != "" {
			var err error
			if creds, err = credentials.NewClientTLSFromFile(s.caFile, ""); err != nil {
				return nil, err
			}
		}
		security = grpc.WithTransportCredentials(creds)
	}
	// gRPC's own reconnect backoff grows to two minutes; held to the client's five seconds,
	// a resume after a short outage finds a connection instead of a waiting channel.
	reconnect := grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
		MinConnectTimeout: 5 * time.Second,
	})
	// Pings find a path that hangs without a reset (the server allows one every 5 s); the
	// stream then breaks and resumes instead of waiting forever.
	pings := grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: 20 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true,
	})
	return grpc.Dial(s.target, security, reconnect, pings)
}

// sessionConfig asks for what this command sends and keeps: pcm16 both ways, audio
// answers, the client ends the turn, and the turn is transcribed.
func sessionConfig(rateHz uint32) *pb.SessionConfig {
	return &pb.SessionConfig{
		InputAudioFormat:   &pb.AudioFormat{Encoding: pb.AudioEncoding_AUDIO_ENCODING_PCM16, SampleRateHz: rateHz},
		OutputAudioFormat:  &pb.AudioFormat{Encoding: pb.AudioEncoding_AUDIO_ENCODING_PCM16},
		OutputModalities:   []pb.Modality{pb.Modality_MODALITY_AUDIO},
		TurnDetection:      &pb.TurnDetection{Type: pb.TurnDetectionType_TURN_DETECTION_TYPE_NONE},
		InputTranscription: &pb.InputTranscriptionConfig{Enabled: true},
	}
}

func run(args []string, stdout, stderr io.Writer) int {
	s, err := parse(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "omni-stream-wav: %v\n", err)
		return 2
	}
	if err := talk(s, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "omni-stream-wav: %v\n", err)
		var refused *duplex.OpenRefusedError
		if errors.As(err, &refused) {
			// Its own status and line: a caller may try again after the server's delay.
			fmt.Fprintf(stderr, "refused: %s, retry after %d ms\n", refused.Code, refused.RetryAfter.Milliseconds())
			return 3
		}
		return 1
	}
	return 0
}

func talk(s settings, stdout, stderr io.Writer) error {
	audio, err := wav.Read(s.wavPath)
	if err != nil {
		return fmt.Errorf("%s: %w", s.wavPath, err)
	}
	conn, err := dial(s)
	if err != nil {
		return err
	}
	defer conn.Close()
	client, err := duplex.Open(conn, sessionConfig(audio.RateHz), duplex.Options{
		APIKey:   s.apiKey,
		OnQueued: func(queued *pb.SessionQueued) { printQueued(stderr, queued) },
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "session %s on %s (%s engine)\n", client.SessionID, s.target, client.Created.GetCapabilities().GetEngine())
	answer := newReply(stdout)
	go answer.follow(client.Events())
	if err := say(client, audio, s); err != nil {
		return err
	}
	select {
	case <-answer.answered:
	case <-time.After(s.timeout):
		return fmt.Errorf("no answer within %v", s.timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	closeErr := client.Close(ctx)
	<-answer.done
	stats := client.Stats()
	fmt.Fprintf(stderr, "reconnects: %d, commands resent: %d\n", stats.Reconnects, stats.Resent)
	if route := client.Route(); route != "" {
		fmt.Fprintf(stderr, "route: %s\n", route) // the replica holding the session at the end
	}
	if err := answer.outcome(); err != nil {
		if closeErr != nil {
			return fmt.Errorf("%w (%v)", err, closeErr)
		}
		return err
	}
	if s.outPath != "" {
		if err := wav.Write(s.outPath, answer.audio()); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "reply: %.2f s saved to %s\n", answer.audio().Seconds(), s.outPath)
	}
	return closeErr
}

// printQueued tells where the open waits in the server's queue.
func printQueued(stderr io.Writer, queued *pb.SessionQueued) {
	fmt.Fprintf(stderr, "queued: position %d, estimated wait %d ms, class %s\n",
		queued.GetPosition(), queued.GetEstimatedWait().AsDuration().Milliseconds(), queued.GetPriorityClass())
}

// say sends the audio in chunks, then commits the turn with a request for an answer.
func say(client *duplex.Client, audio wav.Audio, s settings) error {
	started, sent := time.Now(), time.Duration(0)
	for _, chunk := range audio.Chunks(s.chunkMS) {
		sent += time.Duration(len(chunk)/2) * time.Second / time.Duration(audio.RateHz)
		if s.realtime {
			// A chunk goes out once its last sample exists, on the audio's clock.
			time.Sleep(time.Until(started.Add(sent)))
		}
		if _, err := client.AppendAudio(chunk); err != nil {
			return err
		}
	}
	_, err := client.Commit()
	return err
}
