package render_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/timeline"
)

func TestPlanCutsOnFramesAndCoversTheTimeline(t *testing.T) {
	t.Parallel()
	ws, err := render.Plan("k", 25_500_000, 30, render.DefaultChunk)
	require.NoError(t, err)
	require.Len(t, ws, 3)
	require.Equal(t, [][2]int64{{0, 10_000_000}, {10_000_000, 20_000_000}, {20_000_000, 25_500_000}},
		[][2]int64{{ws[0].FromUS, ws[0].ToUS}, {ws[1].FromUS, ws[1].ToUS}, {ws[2].FromUS, ws[2].ToUS}})
	again, err := render.Plan("k", 25_500_000, 30, render.DefaultChunk)
	require.NoError(t, err)
	require.Equal(t, ws, again, "a resumed render finds the same chunks")
	other, err := render.Plan("other", 25_500_000, 30, render.DefaultChunk)
	require.NoError(t, err)
	require.NotEqual(t, ws[0].Key, other[0].Key)

	odd, err := render.Plan("k", 1_000_000, 30, 100*time.Millisecond) // 3 frames a chunk
	require.NoError(t, err)
	require.Len(t, odd, 10)
	require.Equal(t, int64(100_000), odd[0].ToUS)
	require.Equal(t, int64(1_000_000), odd[9].ToUS)
	_, err = render.Plan("k", 1_000_000, 30, time.Millisecond)
	require.ErrorContains(t, err, "shorter than a frame")
}

func TestKeyChangesWithWhatDecidesTheBytes(t *testing.T) {
	t.Parallel()
	a := uuid.New()
	spec := timeline.Spec{Clips: []timeline.Clip{{AssetID: a, OutUS: 1e6}}, DurationUS: 1e6}
	sum := sha256.Sum256([]byte("a"))
	base, err := render.Key(spec, map[uuid.UUID][]byte{a: sum[:]}, "720p30-h264", "render-1")
	require.NoError(t, err)
	same, err := render.Key(spec, map[uuid.UUID][]byte{a: sum[:]}, "720p30-h264", "render-1")
	require.NoError(t, err)
	require.Equal(t, base, same)
	other := sha256.Sum256([]byte("b"))
	for _, k := range []func() (string, error){
		func() (string, error) {
			return render.Key(spec, map[uuid.UUID][]byte{a: other[:]}, "720p30-h264", "render-1")
		},
		func() (string, error) {
			return render.Key(spec, map[uuid.UUID][]byte{a: sum[:]}, "1080p30-h264", "render-1")
		},
		func() (string, error) {
			return render.Key(spec, map[uuid.UUID][]byte{a: sum[:]}, "720p30-h264", "render-2")
		},
	} {
		got, err := k()
		require.NoError(t, err)
		require.NotEqual(t, base, got)
	}
	_, err = render.Key(spec, nil, "720p30-h264", "render-1")
	require.ErrorContains(t, err, "no sha256")
}
