package media

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/timeline"
)

// Profile is an output format of a render.
type Profile struct {
	Name          string
	Width, Height int
	FPS           int
}

// Profiles are the render outputs offered: 30 fps H.264 with AAC.
var Profiles = map[string]Profile{
	"1080p30-h264":       {Name: "1080p30-h264", Width: 1920, Height: 1080, FPS: 30},
	"720p30-h264":        {Name: "720p30-h264", Width: 1280, Height: 720, FPS: 30},
	"1080x1920-vertical": {Name: "1080x1920-vertical", Width: 1080, Height: 1920, FPS: 30},
}

// EncoderVersion names how a render is encoded (codecs, their settings,
// the filter graph's shape): it is part of a render's content key, so a
// change here renders again instead of reusing an older output.
const EncoderVersion = "render-1"

// RenderInput is an asset a chunk reads: where (a presigned URL or a
// path) and whether it has sound.
type RenderInput struct {
	URL      string
	HasAudio bool
}

// Chunk is one part of a render: the output window [FromUS, ToUS) of
// Spec, in Profile, to Output (Matroska: H.264 video, PCM audio, so that
// the parts join without a gap and the sound is encoded once, at the
// join).
type Chunk struct {
	Spec         timeline.Spec
	Inputs       map[uuid.UUID]RenderInput
	Profile      Profile
	FromUS, ToUS int64
	Output       string
	// TmpDir holds the title files; the output's directory when empty.
	TmpDir string
	// Progress, when set, is told how much of the window ffmpeg has
	// written (microseconds), about once a second.
	Progress func(doneUS int64)
}

// RenderChunk renders one chunk with one ffmpeg run: every clip that
// shows in the window is read from its URL at its offset (never whole),
// scaled and padded (or cropped) to the profile, placed at its time over
// black, the incoming clip of a dissolve fading in over the outgoing one;
// titles are drawn, the clips' sound mixed with the bed. Times are kept
// on the output timeline inside the graph, so a dissolve or a title that
// crosses a chunk's edge renders exactly as in one pass.
func (t *Tool) RenderChunk(ctx context.Context, c Chunk) error {
	ctx, cancel := withDefaultDeadline(ctx, DefaultDeriveTimeout)
	defer cancel()
	dir := c.TmpDir
	if dir == "" {
		dir = filepath.Dir(c.Output)
	}
	args, secrets, files, err := chunkArgs(c, dir)
	defer func() {
		for _, f := range files {
			_ = os.Remove(f) // best effort: a leftover is a small hidden file
		}
	}()
	if err != nil {
		return err
	}
	src := source{display: "render chunk", secrets: secrets}
	var progress io.Writer
	if c.Progress != nil {
		args = append([]string{"-progress", "pipe:1", "-stats_period", "1"}, args...)
		progress = &progressWriter{report: c.Progress}
	}
	return run(ctx, "ffmpeg", "render", t.ffmpeg, src, args, progress)
}

// progressWriter reads ffmpeg's -progress output (key=value lines) and
// reports each out_time_us.
type progressWriter struct {
	report func(doneUS int64)
	line   []byte
}

func (w *progressWriter) Write(p []byte) (int, error) {
	for _, b := range p {
		if b != '\n' {
			if len(w.line) < 256 {
				w.line = append(w.line, b)
			}
			continue
		}
		if v, ok := strings.CutPrefix(string(w.line), "out_time_us="); ok {
			if us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && us >= 0 {
				w.report(us)
			}
		}
		w.line = w.line[:0]
	}
	return len(p), nil
}

// Join concatenates rendered chunks, in order, into one MP4: the video is
// copied, the sound encoded to AAC once. A part is a local path or an
// http(s) URL (a presigned GET), read as a stream. Prefer local files
// checked beforehand: the concat demuxer takes a part it cannot open for
// the end of the input and exits 0 with a short output.
func (t *Tool) Join(ctx context.Context, parts []string, output string) error {
	ctx, cancel := withDefaultDeadline(ctx, DefaultDeriveTimeout)
	defer cancel()
	list := output + ".parts"
	var b strings.Builder
	var secrets []string
	for _, p := range parts {
		if strings.HasPrefix(p, "http://") || strings.HasPrefix(p, "https://") {
			secrets = append(secrets, p)
		} else {
			abs, err := filepath.Abs(p)
			if err != nil {
				return fmt.Errorf("resolve part %q: %w", p, err)
			}
			p = abs
		}
		fmt.Fprintf(&b, "file '%s'\n", strings.ReplaceAll(p, "'", `'\''`))
	}
	if err := os.WriteFile(list, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write part list: %w", err)
	}
	defer os.Remove(list)
	args := []string{"-nostdin", "-hide_banner", "-v", "error", "-protocol_whitelist", remoteProtocols + ",file",
		"-f", "concat", "-safe", "0", "-i", "file:" + list,
		"-map", "0:v", "-map", "0:a", "-c:v", "copy", "-c:a", "aac", "-b:a", "160k", "-ar", "48000",
		"-movflags", "+faststart", "-y", "file:" + output}
	return run(ctx, "ffmpeg", "join", t.ffmpeg, source{display: "render parts", secrets: secrets}, args, nil)
}

// usec renders microseconds as seconds for ffmpeg.
func usec(us int64) string { return strconv.FormatFloat(float64(us)/1e6, 'f', 6, 64) }

// chunkArgs builds the ffmpeg command of a chunk, the URLs it holds, and
// the title files it wrote, for the caller to remove.
func chunkArgs(c Chunk, dir string) (args, secrets, files []string, err error) {
	p, s := c.Profile, c.Spec
	from, to := c.FromUS, c.ToUS
	if from < 0 || to <= from || to > s.DurationUS {
		return nil, nil, nil, fmt.Errorf("render window %s..%s is outside the timeline (0..%s)", usec(from), usec(to), usec(s.DurationUS))
	}
	length := to - from
	args = []string{"-nostdin", "-hide_banner", "-v", "error"}
	var graph []string
	// Black, and silence, on the output timeline from the window's start.
	graph = append(graph,
		fmt.Sprintf("color=c=black:s=%dx%d:r=%d:d=%s,format=yuv420p,setpts=PTS+%s/TB[base]", p.Width, p.Height, p.FPS, usec(length), usec(from)),
		fmt.Sprintf("anullsrc=r=48000:cl=stereo,atrim=duration=%s[silence]", usec(length)))
	video, audio := "base", []string{"silence"}
	input := 0
	addInput := func(id uuid.UUID, at, dur int64) (int, RenderInput, error) {
		in, ok := c.Inputs[id]
		if !ok {
			return 0, RenderInput{}, fmt.Errorf("render: no input for asset %s", id)
		}
		// Each input gets its own whitelists: given once, before the first
		// -i, they would leave every later input free to open any protocol
		// or demuxer (a playlist's udp:// or file: entries).
		src, err := newSource(in.URL)
		if err != nil {
			return 0, RenderInput{}, fmt.Errorf("render: input for asset %s: %w", id, err)
		}
		args = append(args, src.inputArgs("-ss", usec(at), "-t", usec(dur))...)
		for _, secret := range src.secrets {
			if !slices.Contains(secrets, secret) {
				secrets = append(secrets, secret)
			}
		}
		input++
		return input - 1, in, nil
	}
	for i, cl := range s.Clips {
		start, end := max(from, cl.StartUS), min(to, cl.EndUS())
		if cl.Gap() || start >= end {
			continue
		}
		n, in, err := addInput(cl.AssetID, cl.InUS+start-cl.StartUS, end-start)
		if err != nil {
			return nil, nil, files, err
		}
		frame := fmt.Sprintf("scale=%d:%d:force_original_aspect_ratio=decrease,pad=%d:%d:(ow-iw)/2:(oh-ih)/2:black", p.Width, p.Height, p.Width, p.Height)
		if cl.Fit == timeline.FitCover {
			frame = fmt.Sprintf("scale=%d:%d:force_original_aspect_ratio=increase,crop=%d:%d", p.Width, p.Height, p.Width, p.Height)
		}
		// The seek makes the window's first source instant time 0: shifted
		// to its place on the output timeline, then sampled on the
		// output's frame grid, a chunk picks the same source frames as one
		// pass does.
		chain := fmt.Sprintf("[%d:v]setpts=PTS+%s/TB,fps=%d,%s,setsar=1,format=yuva420p", n, usec(start), p.FPS, frame)
		var afades []string
		for _, tr := range s.Transitions {
			switch i {
			case tr.After + 1: // this clip dissolves in over the one before
				chain += fmt.Sprintf(",fade=t=in:st=%s:d=%s:alpha=1", usec(tr.StartUS), usec(tr.DurationUS))
				afades = append(afades, fmt.Sprintf("afade=t=in:st=%s:d=%s", usec(tr.StartUS), usec(tr.DurationUS)))
			case tr.After:
				afades = append(afades, fmt.Sprintf("afade=t=out:st=%s:d=%s", usec(tr.StartUS), usec(tr.DurationUS)))
			}
		}
		graph = append(graph, fmt.Sprintf("%s[v%d]", chain, n),
			fmt.Sprintf("[%s][v%d]overlay=eof_action=pass:format=auto[o%d]", video, n, n))
		video = fmt.Sprintf("o%d", n)
		if in.HasAudio {
			achain := fmt.Sprintf("[%d:a]aresample=48000,aformat=channel_layouts=stereo,asetpts=PTS+%s/TB", n, usec(start))
			for _, f := range afades {
				achain += "," + f
			}
			graph = append(graph, fmt.Sprintf("%s,asetpts=PTS-STARTPTS,adelay=%s:all=1[a%d]", achain, strconv.FormatInt((start-from)/1000, 10), n))
			audio = append(audio, fmt.Sprintf("a%d", n))
		}
	}
	if bed := s.Audio; bed != nil {
		n, _, err := addInput(bed.AssetID, bed.InUS+from, length)
		if err != nil {
			return nil, nil, files, err
		}
		graph = append(graph, fmt.Sprintf("[%d:a]aresample=48000,aformat=channel_layouts=stereo,volume=%gdB[a%d]", n, bed.GainDB, n))
		audio = append(audio, fmt.Sprintf("a%d", n))
	}
	for i, title := range s.Titles {
		if title.EndUS <= from || title.StartUS >= to {
			continue
		}
		f, err := os.CreateTemp(dir, ".title-*.txt")
		if err != nil {
			return nil, nil, files, fmt.Errorf("write title: %w", err)
		}
		file := f.Name()
		files = append(files, file)
		_, err = f.WriteString(title.Text)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, nil, files, fmt.Errorf("write title: %w", err)
		}
		graph = append(graph, fmt.Sprintf("[%s]drawtext=textfile='%s':expansion=none:font=Sans:fontcolor=white:fontsize=%d:box=1:boxcolor=black@0.5:boxborderw=%d:"+
			"x=(w-text_w)/2:y=h-text_h-h/10:enable='gte(t,%s)*lt(t,%s)'[t%d]", video, filterPath(file), max(p.Height/14, 12), max(p.Height/80, 2),
			usec(title.StartUS), usec(title.EndUS), i))
		video = fmt.Sprintf("t%d", i)
	}
	graph = append(graph, fmt.Sprintf("[%s]setpts=PTS-STARTPTS,format=yuv420p[vout]", video),
		fmt.Sprintf("%samix=inputs=%d:duration=first:normalize=0,atrim=duration=%s[aout]", labels(audio), len(audio), usec(length)))
	args = append(args, "-filter_complex", strings.Join(graph, ";"),
		"-map", "[vout]", "-map", "[aout]", "-t", usec(length),
		"-c:v", "libx264", "-preset", "veryfast", "-crf", "20", "-pix_fmt", "yuv420p", "-r", strconv.Itoa(p.FPS), "-g", strconv.Itoa(2*p.FPS),
		"-c:a", "pcm_s16le", "-ar", "48000", "-ac", "2", "-f", "matroska", "-y", "file:"+c.Output)
	return args, secrets, files, nil
}

func labels(names []string) string {
	var b strings.Builder
	for _, n := range names {
		b.WriteString("[" + n + "]")
	}
	return b.String()
}

// filterPath quotes a path for a filter option inside single quotes.
func filterPath(p string) string {
	return strings.NewReplacer(`\`, `\\`, `'`, `\'`, `:`, `\:`).Replace(p)
}
