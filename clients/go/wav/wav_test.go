package wav

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func TestEncodeThenParseKeepsTheSamples(t *testing.T) {
	in := Audio{PCM: []byte{1, 0, 255, 127, 0, 128}, RateHz: 24000}
	var buf bytes.Buffer
	if err := Encode(&buf, in); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 44+len(in.PCM) {
		t.Fatalf("a plain PCM WAV has a 44-byte header; got %d bytes", buf.Len())
	}
	out, err := Parse(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.PCM, in.PCM) || out.RateHz != in.RateHz {
		t.Fatalf("got %v at %d Hz", out.PCM, out.RateHz)
	}
}

func TestParseSkipsOtherChunksAndRefusesStereo(t *testing.T) {
	var buf bytes.Buffer
	if err := Encode(&buf, Audio{PCM: []byte{1, 2, 3, 4}, RateHz: 16000}); err != nil {
		t.Fatal(err)
	}
	plain := buf.Bytes()
	// A LIST chunk of odd size (padded) between fmt and data, as editors write.
	extra := append([]byte("LIST\x03\x00\x00\x00abc\x00"), plain[36:]...)
	withList := append(append([]byte{}, plain[:36]...), extra...)
	if got, err := Parse(withList); err != nil || !bytes.Equal(got.PCM, []byte{1, 2, 3, 4}) {
		t.Fatalf("with a LIST chunk: %v, %v", got.PCM, err)
	}
	stereo := append([]byte{}, plain...)
	binary.LittleEndian.PutUint16(stereo[22:], 2)
	if _, err := Parse(stereo); err == nil {
		t.Fatal("stereo must be refused, not read as mono")
	}
}

func TestChunksCoverTheAudioInOrder(t *testing.T) {
	a := Audio{PCM: make([]byte, 2*1600+10), RateHz: 16000} // 100 ms and 5 samples
	chunks := a.Chunks(20)
	if len(chunks) != 6 || len(chunks[0]) != 640 || len(chunks[5]) != 10 {
		t.Fatalf("got %d chunks", len(chunks))
	}
}
