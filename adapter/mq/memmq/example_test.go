package memmq_test

import (
	"context"
	"fmt"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/shared/catalog"
)

func Example() {
	ctx := context.Background()
	b := memmq.New(nil)
	b.Apply([]catalog.Topic{catalog.AssetFetch}, []catalog.Group{catalog.GroupFetch})

	c, err := b.Consumer(catalog.GroupFetch.BrokerName(),
		map[string]string{catalog.AssetFetch.BrokerName(): catalog.EventFetchRequested}, time.Second)
	if err != nil {
		panic(err)
	}
	_, err = b.Producer().Send(ctx, &mq.Message{Topic: catalog.AssetFetch.BrokerName(),
		Tag: catalog.EventFetchRequested, Keys: []string{"event-1"}, Body: []byte(`{}`)})
	if err != nil {
		panic(err)
	}
	msgs, err := c.Receive(ctx, 16, 30*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(msgs), msgs[0].Topic, msgs[0].Tag, msgs[0].DeliveryAttempt)
	fmt.Println(c.Ack(ctx, msgs[0]))
	// Output:
	// 1 asset_fetch asset.fetch.requested 1
	// <nil>
}
