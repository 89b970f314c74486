package preview

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/task"
)

// timelineLength is how many of the latest transitions a TaskState holds.
const timelineLength = 10

// TaskState is a generation task as a replay would meet it, with its
// latest transitions: what an operator reads beside the verdict.
type TaskState struct {
	TaskID          uuid.UUID            `json:"task_id"`
	TenantID        uuid.UUID            `json:"tenant_id"`
	Status          string               `json:"status"`
	Version         int64                `json:"version"`
	Progress        int                  `json:"progress"`
	CancelRequested bool                 `json:"cancel_requested"`
	Provider        string               `json:"provider,omitempty"`
	ProviderJobID   string               `json:"provider_job_id,omitempty"`
	NextRetryAt     *time.Time           `json:"next_retry_at,omitempty"`
	NextPollAt      *time.Time           `json:"next_poll_at,omitempty"`
	ErrorCode       string               `json:"error_code,omitempty"`
	UpdatedAt       time.Time            `json:"updated_at"`
	Timeline        []task.TimelineEntry `json:"timeline"` // the latest transitions, oldest first
}

// ReadTaskState reads t's state with its latest transitions.
func ReadTaskState(ctx context.Context, q pg.Querier, t task.Task) (*TaskState, error) {
	s := &TaskState{
		TaskID: t.ID, TenantID: t.TenantID, Status: string(t.Status), Version: t.Version, Progress: t.Progress,
		CancelRequested: t.CancelRequested, Provider: t.Provider, ProviderJobID: t.ProviderJobID,
		NextRetryAt: pg.UTC(t.NextRetryAt), NextPollAt: pg.UTC(t.NextPollAt), ErrorCode: t.ErrorCode, UpdatedAt: t.UpdatedAt.UTC(),
	}
	var err error
	s.Timeline, err = task.Timeline(ctx, q, t.ID, timelineLength)
	return s, err
}
