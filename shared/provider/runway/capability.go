package runway

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/aivedio/pipeline/shared/provider"
)

// model is what Runway's text_to_video accepts for one model.
type model struct {
	ratios    []string
	durations []int // the allowed seconds
	// defaultDuration is sent when the request names none.
	defaultDuration int
}

// textToVideo lists the models POST /v1/text_to_video takes, with their
// ratios and durations as the API reference's request types give them
// (runwayml/sdk-python text_to_video_create_params.py, generated from
// Runway's OpenAPI description): gen4.5 takes 1280:720 and 720:1280 and
// any whole number of seconds from 2 to 10; veo3.1 and veo3.1_fast take
// four ratios and 4, 6 or 8 seconds; veo3 takes only 8.
var textToVideo = map[string]model{
	"gen4.5":      {ratios: []string{"1280:720", "720:1280"}, durations: []int{2, 3, 4, 5, 6, 7, 8, 9, 10}, defaultDuration: 5},
	"veo3.1":      {ratios: veoRatios, durations: []int{4, 6, 8}, defaultDuration: 8},
	"veo3.1_fast": {ratios: veoRatios, durations: []int{4, 6, 8}, defaultDuration: 8},
	"veo3":        {ratios: veoRatios, durations: []int{8}, defaultDuration: 8},
}

var veoRatios = []string{"1280:720", "720:1280", "1080:1920", "1920:1080"}

// imageOnly are Runway video models that exist only on
// POST /v1/image_to_video: they need a promptImage, which a
// [provider.SubmitRequest] does not carry.
var imageOnly = []string{"gen4_turbo", "gen4", "gen4_aleph", "gen3a_turbo"}

// Supports reports whether Runway can serve req through text_to_video: a
// known model, one of its ratios and durations. An unsupported request is
// a [provider.ClassRejected] error with Code [CodeUnsupported] that names
// every part Runway would refuse. Submit checks the same before it sends.
func (c *Client) Supports(req provider.SubmitRequest) error {
	_, err := bodyFor(req)
	return err
}

// createBody is the body of POST /v1/text_to_video.
type createBody struct {
	Model      string `json:"model"`
	PromptText string `json:"promptText"`
	Ratio      string `json:"ratio"`
	Duration   int    `json:"duration"`
}

// bodyFor maps req onto Runway's create body, or says what does not fit.
func bodyFor(req provider.SubmitRequest) (createBody, error) {
	m, known := textToVideo[req.Model]
	if !known {
		why := fmt.Sprintf("model %q is not a Runway text-to-video model (%s)", provider.Shorten(req.Model, 64), strings.Join(slices.Sorted(maps.Keys(textToVideo)), ", "))
		if slices.Contains(imageOnly, req.Model) {
			why = fmt.Sprintf("model %q needs an input image (POST /v1/image_to_video), which the request does not carry", req.Model)
		}
		return createBody{}, unsupported(why)
	}
	body := createBody{Model: req.Model, PromptText: req.Prompt, Ratio: m.ratios[0], Duration: req.DurationSeconds}
	var problems []string
	if req.Resolution != "" {
		ratio, ok := ratioOf(req.Resolution)
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("resolution %q is not WIDTHxHEIGHT", provider.Shorten(req.Resolution, 32)))
		case !slices.Contains(m.ratios, ratio):
			problems = append(problems, fmt.Sprintf("ratio %s is not offered by %s (%s)", ratio, req.Model, strings.Join(m.ratios, ", ")))
		default:
			body.Ratio = ratio
		}
	}
	switch {
	case req.DurationSeconds == 0:
		body.Duration = m.defaultDuration
	case !slices.Contains(m.durations, req.DurationSeconds):
		problems = append(problems, fmt.Sprintf("duration %ds is not offered by %s (%s s)", req.DurationSeconds, req.Model, joinInts(m.durations)))
	}
	if strings.TrimSpace(req.Prompt) == "" {
		problems = append(problems, "the prompt is empty")
	} else if n := utf16Len(req.Prompt); n > 1000 {
		problems = append(problems, fmt.Sprintf("the prompt is %d UTF-16 units, over Runway's 1000", n))
	}
	if len(problems) > 0 {
		return createBody{}, unsupported(strings.Join(problems, "; "))
	}
	return body, nil
}

func unsupported(why string) *provider.Error {
	return &provider.Error{Class: provider.ClassRejected, Code: CodeUnsupported, Message: "runway cannot serve this request: " + why}
}

// ratioOf turns "1280x720" into Runway's "1280:720".
func ratioOf(resolution string) (string, bool) {
	w, h, ok := strings.Cut(strings.ToLower(strings.TrimSpace(resolution)), "x")
	if !ok {
		return "", false
	}
	wn, errW := strconv.Atoi(w)
	hn, errH := strconv.Atoi(h)
	if errW != nil || errH != nil || wn <= 0 || hn <= 0 {
		return "", false
	}
	return strconv.Itoa(wn) + ":" + strconv.Itoa(hn), true
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}

// utf16Len counts s the way Runway bounds promptText.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}
