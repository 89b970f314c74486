package probe_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/probe"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/review"
)

// TestWithReviewOnTheProbeRequiresTheReviewAndAsksForIt: a task probed
// with content review on has a pending review recorded with its probe,
// which holds its finish, and one REVIEW step asked, also when the probe
// is delivered again.
func TestWithReviewOnTheProbeRequiresTheReviewAndAsksForIt(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	b.fn = probe.New(probe.Params{Pool: b.pool, Blob: b.store, Media: newTool(t), Review: true})
	assetID := storeOutput(t, b.pool, b.store, b.task, clip(t, false))
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id, assetID))

	r, err := review.Get(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err, "the probe records that the task needs a review")
	require.Equal(t, review.Pending, r.Status)
	blocked, err := review.Blocks(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	require.True(t, blocked, "the pending review holds the task's finish")
	steps := tags(storedEvents(t, b.pool, catalog.EventPostprocess))
	require.ElementsMatch(t, []string{catalog.TagTranscodeProxy, catalog.TagThumbnail, catalog.TagWaveform, catalog.TagReview}, steps)

	require.NoError(t, b.deliver(t, id, assetID))
	require.Len(t, storedEvents(t, b.pool, catalog.EventPostprocess), 4, "a duplicate asks for nothing more")
}

// TestATaskProbedWithReviewOffIsNotHeldWhenReviewIsTurnedOn: the review
// is decided at the probe. A task probed with review off needs none, and
// turning review on afterwards (the probe's delivery coming again to a
// stage now configured with review) neither holds its finish nor asks for
// a review.
func TestATaskProbedWithReviewOffIsNotHeldWhenReviewIsTurnedOn(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	assetID := storeOutput(t, b.pool, b.store, b.task, clip(t, false))
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id, assetID))
	_, err := review.Get(t.Context(), b.pool, b.task.ID)
	require.ErrorIs(t, err, review.ErrNotFound, "review off: none required")

	b.fn = probe.New(probe.Params{Pool: b.pool, Blob: b.store, Media: newTool(t), Review: true})
	require.NoError(t, b.deliver(t, id, assetID))
	_, err = review.Get(t.Context(), b.pool, b.task.ID)
	require.ErrorIs(t, err, review.ErrNotFound, "the redelivered probe is a duplicate: review is not required after the fact")
	blocked, err := review.Blocks(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	require.False(t, blocked, "nothing holds the task's finish")
	require.NotContains(t, tags(storedEvents(t, b.pool, catalog.EventPostprocess)), catalog.TagReview)
}
