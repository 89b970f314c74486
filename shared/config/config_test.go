package config_test

import (
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/config"
)

type testConfig struct {
	config.Postgres
	config.Redis
}

func (c testConfig) Validate() error {
	if err := c.Postgres.Validate(); err != nil {
		return err
	}
	return c.Redis.Validate()
}

func TestLoad(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://u@127.0.0.1:5432/db")
	t.Setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
	var cfg testConfig
	require.NoError(t, config.Load(&cfg))
	require.Equal(t, int32(16), cfg.MaxConns)
	require.Equal(t, "redis://127.0.0.1:6379/0", cfg.Redis.URL)

	t.Setenv("REDIS_URL", "http://nope")
	require.ErrorContains(t, config.Load(&cfg), "REDIS_URL must be a redis://")
}

func TestLoadNamesMissingVariable(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	t.Setenv("REDIS_URL", "redis://127.0.0.1:6379/0")
	var cfg testConfig
	require.ErrorContains(t, config.Load(&cfg), "DATABASE_URL")
}

func TestValidateNamesTheVariable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		block config.Validator
		want  string
	}{
		{config.Postgres{URL: "mysql://x", MaxConns: 1}, "DATABASE_URL"},
		{config.Postgres{URL: "postgres://x", MaxConns: 0}, "DATABASE_MAX_CONNS"},
		{config.RocketMQ{Endpoint: "nohostport"}, "ROCKETMQ_ENDPOINT"},
		{config.RocketMQ{Endpoint: "h:1", AccessKey: "a"}, "ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY"},
		{config.S3{Endpoint: "ftp://x", Bucket: "b"}, "S3_ENDPOINT"},
		{config.S3{Bucket: ""}, "S3_BUCKET"},
		{config.S3{Bucket: "b", AccessKeyID: "a"}, "S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY"},
		{config.Provider{Name: "sim", BaseURL: "localhost:8080", Timeout: time.Second}, "PROVIDER_BASE_URL"},
		{config.Provider{Name: "sim", BaseURL: "http://sim", CallbackURL: "/cb", Timeout: time.Second}, "PROVIDER_CALLBACK_URL"},
		{config.Provider{Name: "sim", BaseURL: "http://sim", Timeout: time.Millisecond}, "PROVIDER_TIMEOUT"},
		{config.Provider{Name: "sim", BaseURL: "http://sim", Timeout: time.Second}, "PROVIDER_BREAKER_FAILURES"},
	}
	for _, tt := range tests {
		require.ErrorContains(t, tt.block.Validate(), tt.want)
	}
}

// TestREADMEListsEveryVariable keeps the configuration table
// (docs/configuration.md) in step with the blocks: a new or renamed
// variable fails here.
func TestREADMEListsEveryVariable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	for _, block := range []any{config.Postgres{}, config.RocketMQ{}, config.Redis{}, config.S3{}, config.Media{}, config.Ops{}, config.Relay{}, config.Source{}, config.Provider{}, config.API{}, config.Journey{}, config.Retention{}} {
		typ := reflect.TypeOf(block)
		for i := range typ.NumField() {
			name := typ.Field(i).Tag.Get("envconfig")
			require.NotEmpty(t, name, "%s.%s has no envconfig tag", typ.Name(), typ.Field(i).Name)
			require.Contains(t, string(readme), "`"+name+"`", "docs/configuration.md does not document %s", name)
		}
	}
}

// TestIntakeClassesParseAndAreChecked: API_TENANT_RATE and
// API_TENANT_BURST parse as priority:value lists, and a class with a rate
// and no burst, or a limit that cannot be met, is named at start.
func TestIntakeClassesParseAndAreChecked(t *testing.T) {
	t.Setenv("API_TENANT_RATE", "0:0.5,5:20")
	t.Setenv("API_TENANT_BURST", "0:4,5:100")
	var cfg struct{ config.API }
	require.NoError(t, config.Load(&cfg))
	require.Equal(t, map[int]float64{0: 0.5, 5: 20}, cfg.TenantRate)
	require.Equal(t, map[int]int{0: 4, 5: 100}, cfg.TenantBurst)

	valid := cfg.API
	for _, tt := range []struct {
		rate  map[int]float64
		burst map[int]int
		want  string
	}{
		{map[int]float64{0: 1, 5: 2}, map[int]int{0: 1}, "must list the same priority classes"},
		{map[int]float64{0: 1, 5: 2}, map[int]int{0: 1, 6: 1}, "no burst for priority class 5"},
		{map[int]float64{0: 0}, map[int]int{0: 1}, "API_TENANT_RATE of priority class 0 must be above 0"},
		{map[int]float64{0: 1}, map[int]int{0: 0}, "API_TENANT_BURST of priority class 0 must be at least 1"},
	} {
		c := valid
		c.TenantRate, c.TenantBurst = tt.rate, tt.burst
		require.ErrorContains(t, c.Validate(), tt.want)
	}
	t.Setenv("API_TENANT_RATE", "")
	t.Setenv("API_TENANT_BURST", "")
	require.NoError(t, config.Load(&cfg))
	require.Empty(t, cfg.TenantRate, "both empty: no limit")
}
