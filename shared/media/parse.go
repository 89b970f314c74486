package media

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Bounds past which a value in ffprobe's report is taken for garbage.
const (
	MaxDuration   = 7 * 24 * time.Hour
	MaxDimension  = 16384
	MaxFrameRate  = 500
	MaxSampleRate = 1_000_000
	MaxChannels   = 255
)

// ParseProbe parses the JSON that `ffprobe -print_format json -show_format
// -show_streams` writes. It keeps the first video stream (cover art, marked
// attached_pic, is not video) and the first audio stream.
//
// ffprobe writes most numbers as strings, and "N/A" or nothing for values it
// does not know; those become zero. Values no real file has are refused
// rather than passed on: a negative duration or size, a duration over
// [MaxDuration], a video dimension outside 1..[MaxDimension], a frame rate
// that is malformed, negative or has a zero denominator. Every such refusal,
// and malformed JSON, matches [ErrInvalidProbe]; a report with neither a
// video nor an audio stream is [ErrNoMediaStreams]. ParseProbe never panics.
//
// r_frame_rate is the frame rate kept. Some containers report their time
// base there (WebM from browsers says "1000/1"); above [MaxFrameRate] the
// average frame rate is used instead, or zero when that is unknown too.
func ParseProbe(data []byte) (Probe, error) {
	var doc probeDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return Probe{}, invalid("malformed JSON: %v", err)
	}
	if doc.Format == nil {
		return Probe{}, invalid("no format section")
	}
	f := doc.Format
	var (
		p   = Probe{FormatName: f.FormatName}
		err error
	)
	if p.Duration, err = parseSeconds("format.duration", f.Duration); err != nil {
		return Probe{}, err
	}
	if p.SizeBytes, err = parseInt("format.size", f.Size, math.MaxInt64); err != nil {
		return Probe{}, err
	}
	if p.BitRate, err = parseInt("format.bit_rate", f.BitRate, math.MaxInt64); err != nil {
		return Probe{}, err
	}

	durationKnown := p.Duration > 0
	for i, s := range doc.Streams {
		switch {
		case s.CodecType == "video" && p.Video == nil && !s.isCoverArt():
			if p.Video, err = parseVideo(i, s); err != nil {
				return Probe{}, err
			}
		case s.CodecType == "audio" && p.Audio == nil:
			if p.Audio, err = parseAudio(i, s); err != nil {
				return Probe{}, err
			}
		}
		if !durationKnown {
			// The container did not say; the longest stream does.
			d, err := parseSeconds(fmt.Sprintf("streams[%d].duration", i), s.Duration)
			if err != nil {
				return Probe{}, err
			}
			p.Duration = max(p.Duration, d)
		}
	}
	if p.Video == nil && p.Audio == nil {
		return Probe{}, fmt.Errorf("parse ffprobe output: %d streams: %w", len(doc.Streams), ErrNoMediaStreams)
	}
	return p, nil
}

// The parts of ffprobe's report that ParseProbe reads.
type (
	probeDoc struct {
		Streams []probeStream `json:"streams"`
		Format  *probeFormat  `json:"format"`
	}
	probeFormat struct {
		FormatName string `json:"format_name"`
		Duration   value  `json:"duration"`
		Size       value  `json:"size"`
		BitRate    value  `json:"bit_rate"`
	}
	probeStream struct {
		CodecType    string `json:"codec_type"`
		CodecName    string `json:"codec_name"`
		Width        value  `json:"width"`
		Height       value  `json:"height"`
		PixFmt       string `json:"pix_fmt"`
		RFrameRate   string `json:"r_frame_rate"`
		AvgFrameRate string `json:"avg_frame_rate"`
		SampleRate   value  `json:"sample_rate"`
		Channels     value  `json:"channels"`
		Duration     value  `json:"duration"`
		Disposition  struct {
			AttachedPic value `json:"attached_pic"`
		} `json:"disposition"`
	}
)

func (s probeStream) isCoverArt() bool { return s.Disposition.AttachedPic == "1" }

func parseVideo(i int, s probeStream) (*VideoStream, error) {
	field := func(name string) string { return fmt.Sprintf("streams[%d].%s", i, name) }
	v := &VideoStream{Codec: s.CodecName, PixFmt: s.PixFmt}
	w, err := parseInt(field("width"), s.Width, MaxDimension)
	if err != nil {
		return nil, err
	}
	h, err := parseInt(field("height"), s.Height, MaxDimension)
	if err != nil {
		return nil, err
	}
	if w == 0 || h == 0 {
		return nil, invalid("video %s: %dx%d has no pixels", field("width/height"), w, h)
	}
	v.Width, v.Height = int(w), int(h)
	if v.FrameRate, err = parseRate(field("r_frame_rate"), s.RFrameRate); err != nil {
		return nil, err
	}
	if v.FrameRate > MaxFrameRate {
		avg, err := parseRate(field("avg_frame_rate"), s.AvgFrameRate)
		if err != nil || avg > MaxFrameRate {
			avg = 0
		}
		v.FrameRate = avg
	}
	return v, nil
}

func parseAudio(i int, s probeStream) (*AudioStream, error) {
	field := func(name string) string { return fmt.Sprintf("streams[%d].%s", i, name) }
	rate, err := parseInt(field("sample_rate"), s.SampleRate, MaxSampleRate)
	if err != nil {
		return nil, err
	}
	ch, err := parseInt(field("channels"), s.Channels, MaxChannels)
	if err != nil {
		return nil, err
	}
	return &AudioStream{Codec: s.CodecName, SampleRate: int(rate), Channels: int(ch)}, nil
}

// value is a number as ffprobe writes it: a JSON string ("2.000000",
// "N/A") or a JSON number, depending on the field and the ffprobe version.
// The empty value is unknown.
type value string

func (v *value) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*v = ""
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*v = value(strings.TrimSpace(s))
	case len(b) > 0 && (b[0] == '-' || (b[0] >= '0' && b[0] <= '9')):
		*v = value(b)
	default:
		return fmt.Errorf("want a number or a string, got %.32s", b)
	}
	return nil
}

func (v value) unknown() bool { return v == "" || v == "N/A" }

func parseInt(field string, v value, limit int64) (int64, error) {
	if v.unknown() {
		return 0, nil
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return 0, invalid("%s %.32q: out of range", field, v)
		}
		return 0, invalid("%s %.32q: not an integer", field, v)
	}
	if n < 0 || n > limit {
		return 0, invalid("%s %d: out of range 0..%d", field, n, limit)
	}
	return n, nil
}

func parseSeconds(field string, v value) (time.Duration, error) {
	if v.unknown() {
		return 0, nil
	}
	sec, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsNaN(sec) || math.IsInf(sec, 0) {
		return 0, invalid("%s %.32q: not a number of seconds", field, v)
	}
	if sec < 0 {
		return 0, invalid("%s %.32q: negative", field, v)
	}
	if sec > MaxDuration.Seconds() {
		return 0, invalid("%s %.32q: longer than %s", field, v, MaxDuration)
	}
	return time.Duration(math.Round(sec * float64(time.Second))), nil
}

// parseRate reads a rational "num/den" such as "30000/1001".
func parseRate(field, s string) (float64, error) {
	s = strings.TrimSpace(s)
	if value(s).unknown() {
		return 0, nil
	}
	numS, denS, ok := strings.Cut(s, "/")
	if !ok {
		return 0, invalid("%s %.32q: not a fraction", field, s)
	}
	num, err1 := strconv.ParseInt(numS, 10, 64)
	den, err2 := strconv.ParseInt(denS, 10, 64)
	switch {
	case err1 != nil || err2 != nil:
		return 0, invalid("%s %.32q: not a fraction of integers", field, s)
	case den == 0:
		return 0, invalid("%s %.32q: zero denominator", field, s)
	case (num < 0) != (den < 0) && num != 0:
		return 0, invalid("%s %.32q: negative", field, s)
	}
	return float64(num) / float64(den), nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("parse ffprobe output: %s: %w", fmt.Sprintf(format, args...), ErrInvalidProbe)
}
