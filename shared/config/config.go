// Package config holds the environment-driven configuration blocks that the
// binaries share. Each binary embeds the blocks it needs into one Config
// struct, loads it once at start with [Load] and calls Validate.
//
// Nothing else in the module reads the environment: tests use t.Setenv.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/kelseyhightower/envconfig"
)

// Postgres locates the source-of-truth database.
type Postgres struct {
	URL      string `envconfig:"DATABASE_URL" required:"true" desc:"PostgreSQL connection URL, e.g. postgres://user@127.0.0.1:5432/aivedio?sslmode=disable"`
	MaxConns int32  `envconfig:"DATABASE_MAX_CONNS" default:"16" desc:"upper bound of the connection pool; PostgreSQL slows past ~16 busy connections on 2 cores"`
}

// Validate reports the first unusable setting, naming its variable.
func (p Postgres) Validate() error {
	u, err := url.Parse(p.URL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return errors.New("DATABASE_URL must be a postgres:// URL")
	}
	if p.MaxConns < 1 {
		return errors.New("DATABASE_MAX_CONNS must be at least 1")
	}
	return nil
}

// RocketMQ locates the RocketMQ 5 proxy (gRPC) and, for administration, the
// name server.
type RocketMQ struct {
	Endpoint  string `envconfig:"ROCKETMQ_ENDPOINT" required:"true" desc:"host:port of the RocketMQ 5 proxy's gRPC endpoint"`
	Namesrv   string `envconfig:"ROCKETMQ_NAMESRV" desc:"host:port of the name server; needed only by 'adapter topics apply'"`
	Cluster   string `envconfig:"ROCKETMQ_CLUSTER" default:"DefaultCluster" desc:"broker cluster that topics and groups are created in"`
	AccessKey string `envconfig:"ROCKETMQ_ACCESS_KEY" desc:"ACL access key; empty when the broker has no ACL"`
	SecretKey string `envconfig:"ROCKETMQ_SECRET_KEY" desc:"ACL secret key"`
	// AdminClasspath points at the RocketMQ jars whose admin tool applies the
	// topic catalog: the Go client has no admin API.
	AdminClasspath string `envconfig:"ROCKETMQ_ADMIN_CLASSPATH" desc:"Java classpath of the RocketMQ tools jars (e.g. /opt/rocketmq/lib/*); needed only by 'adapter topics apply'"`
}

// Validate reports the first unusable setting, naming its variable.
func (r RocketMQ) Validate() error {
	if !strings.Contains(r.Endpoint, ":") {
		return fmt.Errorf("ROCKETMQ_ENDPOINT must be host:port, got %q", r.Endpoint)
	}
	if (r.AccessKey == "") != (r.SecretKey == "") {
		return errors.New("ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY must be set together")
	}
	return nil
}

// Redis locates the coordination store (slots, leases, live progress).
type Redis struct {
	URL string `envconfig:"REDIS_URL" required:"true" desc:"Redis URL, e.g. redis://127.0.0.1:6379/0"`
}

// Validate reports the first unusable setting, naming its variable.
func (r Redis) Validate() error {
	if u, err := url.Parse(r.URL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return errors.New("REDIS_URL must be a redis:// or rediss:// URL")
	}
	return nil
}

// S3 locates the object store that holds every media byte.
type S3 struct {
	Endpoint        string `envconfig:"S3_ENDPOINT" desc:"S3-compatible endpoint URL; empty means AWS S3"`
	Region          string `envconfig:"S3_REGION" default:"us-east-1" desc:"S3 region"`
	Bucket          string `envconfig:"S3_BUCKET" default:"aivedio-media" desc:"bucket for media objects"`
	AccessKeyID     string `envconfig:"S3_ACCESS_KEY_ID" desc:"S3 access key id; empty uses the AWS default credential chain"`
	SecretAccessKey string `envconfig:"S3_SECRET_ACCESS_KEY" desc:"S3 secret access key"`
}

// Validate reports the first unusable setting, naming its variable.
func (s S3) Validate() error {
	if s.Endpoint != "" {
		if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return errors.New("S3_ENDPOINT must be an http:// or https:// URL")
		}
	}
	if s.Bucket == "" {
		return errors.New("S3_BUCKET must not be empty")
	}
	if (s.AccessKeyID == "") != (s.SecretAccessKey == "") {
		return errors.New("S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY must be set together")
	}
	return nil
}

// Media locates the ffmpeg tools.
type Media struct {
	FFmpegPath  string `envconfig:"FFMPEG_PATH" default:"ffmpeg" desc:"ffmpeg binary"`
	FFprobePath string `envconfig:"FFPROBE_PATH" default:"ffprobe" desc:"ffprobe binary"`
}

// Validator is a configuration block or Config that can check itself.
type Validator interface{ Validate() error }

// Load fills cfg from the environment and validates it. cfg must be a pointer
// to a struct whose fields carry envconfig tags.
func Load(cfg Validator) error {
	if err := envconfig.Process("", cfg); err != nil {
		return fmt.Errorf("load configuration: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return nil
}
