// Package wav reads and writes the one WAV layout the service speaks: mono 16-bit PCM.
package wav

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Audio is mono signed 16-bit little-endian PCM at RateHz.
type Audio struct {
	PCM    []byte
	RateHz uint32
}

// Chunks cuts the audio into pieces of ms milliseconds (the last may be shorter).
func (a Audio) Chunks(ms int) [][]byte {
	size := int(a.RateHz) * ms / 1000 * 2
	if size <= 0 {
		size = 2
	}
	var chunks [][]byte
	for start := 0; start < len(a.PCM); start += size {
		end := start + size
		if end > len(a.PCM) {
			end = len(a.PCM)
		}
		chunks = append(chunks, a.PCM[start:end])
	}
	return chunks
}

// Seconds is the audio's length.
func (a Audio) Seconds() float64 { return float64(len(a.PCM)) / 2 / float64(a.RateHz) }

type format struct {
	Tag, Channels      uint16
	RateHz, ByteRate   uint32
	BlockAlign, BitsPS uint16
}

// Read reads a mono 16-bit PCM WAV file; any other layout is an error that says what it is.
func Read(path string) (Audio, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Audio{}, err
	}
	return Parse(data)
}

// Parse reads a mono 16-bit PCM WAV from memory, skipping chunks it does not need.
func Parse(data []byte) (Audio, error) {
	if len(data) < 12 || string(data[0:4]) != "RIFF" || string(data[8:12]) != "WAVE" {
		return Audio{}, errors.New("not a RIFF/WAVE file")
	}
	var fmtChunk *format
	for rest := data[12:]; len(rest) >= 8; {
		id, size := string(rest[0:4]), binary.LittleEndian.Uint32(rest[4:8])
		if uint64(size) > uint64(len(rest)-8) {
			return Audio{}, fmt.Errorf("chunk %q runs past the end of the file", id)
		}
		body := rest[8 : 8+size]
		switch id {
		case "fmt ":
			var f format
			if err := binary.Read(bytes.NewReader(body), binary.LittleEndian, &f); err != nil {
				return Audio{}, fmt.Errorf("fmt chunk: %w", err)
			}
			fmtChunk = &f
		case "data":
			if fmtChunk == nil {
				return Audio{}, errors.New("data chunk before fmt chunk")
			}
			if fmtChunk.Tag != 1 || fmtChunk.Channels != 1 || fmtChunk.BitsPS != 16 {
				return Audio{}, fmt.Errorf("need mono 16-bit PCM, got format %d, %d channels, %d bits",
					fmtChunk.Tag, fmtChunk.Channels, fmtChunk.BitsPS)
			}
			return Audio{PCM: body[:len(body)&^1], RateHz: fmtChunk.RateHz}, nil
		}
		rest = rest[8+size+size%2:] // chunks are padded to an even size
	}
	return Audio{}, errors.New("no data chunk")
}

// Write writes audio as a mono 16-bit PCM WAV file.
func Write(path string, audio Audio) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := Encode(f, audio); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Encode writes the WAV bytes of audio to w.
func Encode(w io.Writer, audio Audio) error {
	size := uint32(len(audio.PCM))
	header := struct {
		Riff     [4]byte
		Size     uint32
		Wave     [4]byte
		FmtID    [4]byte
		FmtSize  uint32
		Format   format
		DataID   [4]byte
		DataSize uint32
	}{
		[4]byte{'R', 'I', 'F', 'F'}, 36 + size, [4]byte{'W', 'A', 'V', 'E'},
		[4]byte{'f', 'm', 't', ' '}, 16,
		format{Tag: 1, Channels: 1, RateHz: audio.RateHz, ByteRate: audio.RateHz * 2, BlockAlign: 2, BitsPS: 16},
		[4]byte{'d', 'a', 't', 'a'}, size,
	}
	if err := binary.Write(w, binary.LittleEndian, header); err != nil {
		return err
	}
	_, err := w.Write(audio.PCM)
	return err
}
