package config

import "errors"

// The Config of each binary and command, in one place so that the
// deployment manifests can be checked against exactly what each one reads
// (knative/ tests): a renamed variable breaks a test, not production.

// Migrate is what `adapter migrate` reads.
type Migrate struct {
	Postgres
}

// Topics is what `adapter topics` reads.
type Topics struct {
	RocketMQ
	RocketMQAdmin
}

// Validate checks every block.
func (c Topics) Validate() error {
	return errors.Join(c.RocketMQ.Validate(), c.RocketMQAdmin.Validate())
}

// RelayCommand is what `adapter relay` reads.
type RelayCommand struct {
	Postgres
	RocketMQ
	Ops
	Relay
}

// Validate checks every block.
func (c RelayCommand) Validate() error {
	return errors.Join(c.Postgres.Validate(), c.RocketMQ.Validate(), c.Ops.Validate(), c.Relay.Validate())
}

// SourceCommand is what `adapter source` reads.
type SourceCommand struct {
	Postgres
	RocketMQ
	Ops
	Source
}

// Validate checks every block.
func (c SourceCommand) Validate() error {
	return errors.Join(c.Postgres.Validate(), c.RocketMQ.Validate(), c.Ops.Validate(), c.Source.Validate())
}

// DrainCommand is what `adapter dlq drain` reads.
type DrainCommand struct {
	Postgres
	RocketMQ
	Ops
}

// Validate checks every block.
func (c DrainCommand) Validate() error {
	return errors.Join(c.Postgres.Validate(), c.RocketMQ.Validate(), c.Ops.Validate())
}

// StageFunction is what a stage function (the root function, STAGE=...)
// reads.
type StageFunction struct {
	Stage string `envconfig:"STAGE" required:"true" desc:"the stage this function serves"`
	Postgres
	Redis
	S3
	Media
	Provider
	Journey
	Retention
	Review
	Ops
}

// Validate checks every block.
func (c StageFunction) Validate() error {
	var stage error
	if c.Stage == "" {
		stage = errors.New("STAGE must name a stage")
	}
	return errors.Join(stage, c.Postgres.Validate(), c.Redis.Validate(), c.S3.Validate(), c.Media.Validate(), c.Provider.Validate(),
		c.Journey.Validate(), c.Retention.Validate(), c.Review.Validate(), c.Ops.Validate())
}

// APIServer is what the public API reads.
type APIServer struct {
	Postgres
	Redis
	S3
	Provider
	Ops
	API
	Retention
}

// Validate checks every block.
func (c APIServer) Validate() error {
	return errors.Join(c.Postgres.Validate(), c.Redis.Validate(), c.S3.Validate(), c.Provider.Validate(), c.Ops.Validate(), c.API.Validate(),
		c.Retention.Validate())
}

// ReplayCommand is what `adapter replay` reads.
type ReplayCommand struct {
	Postgres
	Retention
}

// Validate checks every block.
func (c ReplayCommand) Validate() error {
	return errors.Join(c.Postgres.Validate(), c.Retention.Validate())
}
