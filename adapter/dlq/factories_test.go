package dlq_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/envelope"
)

// validEvent is a CloudEvent with a valid envelope.
func validEvent(t *testing.T) event.Event {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{
		EventType: "test.happened", Producer: "test", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(), Payload: map[string]any{"n": 1},
	})
	require.NoError(t, err)
	ev, err := env.ToCloudEvent()
	require.NoError(t, err)
	return ev
}

// sendEvent publishes ev to topic with tag and returns its message id.
func sendEvent(ctx context.Context, t *testing.T, p mq.Producer, topic, tag string, ev event.Event) string {
	t.Helper()
	id, err := cerocketmq.NewSender(p, topic).SendMessage(cerocketmq.WithTag(ctx, tag), binding.ToMessage(&ev))
	require.NoError(t, err)
	return id
}

// row is a message_quarantine row as the tests read it.
type row struct {
	Consumer, MessageID, Topic, Tag string
	EventID                         *string
	ErrorClass, ErrorCode, Source   string
	ErrorDetail                     string
	DeliveryAttempt                 int
	Properties                      map[string]string
	Body                            []byte
}

// rows returns every quarantine row, oldest first.
func rows(t *testing.T, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) []row {
	t.Helper()
	rs, err := db.Query(context.Background(), `
		SELECT consumer_name, message_id, topic, coalesce(tag, ''), event_id::text, error_class, error_code,
			source, coalesce(error_detail, ''), delivery_attempt, properties, body
		FROM message_quarantine ORDER BY received_at, message_id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		var props []byte
		err := r.Scan(&x.Consumer, &x.MessageID, &x.Topic, &x.Tag, &x.EventID, &x.ErrorClass, &x.ErrorCode,
			&x.Source, &x.ErrorDetail, &x.DeliveryAttempt, &props, &x.Body)
		if err == nil {
			err = json.Unmarshal(props, &x.Properties)
		}
		return x, err
	})
	require.NoError(t, err)
	return out
}
