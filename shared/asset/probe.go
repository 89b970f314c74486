package asset

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/pg"
)

// RecordProbe stores what ffprobe found in an asset not probed yet (a
// redelivered probe changes nothing): the typed columns queries need, and
// the whole probe.
func RecordProbe(ctx context.Context, q pg.Querier, id uuid.UUID, p media.Probe) error {
	raw, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encode probe: %w", err)
	}
	var (
		width, height *int
		video, audio  *string
	)
	if p.Video != nil {
		width, height, video = &p.Video.Width, &p.Video.Height, &p.Video.Codec
	}
	if p.Audio != nil {
		audio = &p.Audio.Codec
	}
	_, err = q.Exec(ctx, `UPDATE assets SET duration_ms = $2, width = $3, height = $4, video_codec = $5, audio_codec = $6, bitrate = $7,
			probe = $8, updated_at = now()
		WHERE asset_id = $1 AND probe IS NULL`,
		id, p.Duration.Milliseconds(), width, height, video, audio, p.BitRate, raw)
	if err != nil {
		return fmt.Errorf("record probe of asset %s: %w", id, err)
	}
	return nil
}
