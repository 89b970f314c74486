package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/tenant"
)

const tenantsUsage = `usage: adapter tenants create --name N --credits C [--priority P] [--admin]
       adapter tenants quota <tenant-id> [--max-assets N|default] [--max-stored-bytes B|default]
  quota sets one tenant's own limits on what it keeps stored (assets not FAILED, and
  their bytes) in place of API_TENANT_MAX_ASSETS and API_TENANT_MAX_STORED_BYTES;
  default gives a limit back to the deployment's. Past a limit its uploads,
  generations and renders are refused 409 quota_exceeded (DATABASE_URL)`

// runTenants serves `adapter tenants create` and `adapter tenants quota`.
func runTenants(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "quota" {
		return runTenantQuota(ctx, args[1:])
	}
	if len(args) == 0 || args[0] != "create" {
		return errors.New(tenantsUsage)
	}
	return runTenantCreate(ctx, args)
}

// runTenantCreate makes a tenant, its credit account and its first API
// key, printed once. Only the key's hash is stored, so the key cannot be
// shown again; a lost key is replaced by a new one.
func runTenantCreate(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("tenants create", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error returned says what is wrong
	name := fs.String("name", "", "tenant name (required)")
	credits := fs.Int64("credits", 0, "starting credits")
	priority := fs.Int("priority", 0, "tenant priority (0-100): it orders the tenant's work waiting for provider slots (a head start of SCHED_PRIORITY_STEP per point, see docs/scheduling.md), picks the intake class of API_TENANT_RATE, and tenants below API_SHED_BELOW_PRIORITY are slowed down and shed first when the pipeline falls behind")
	admin := fs.Bool("admin", false, "give the key role admin (operator endpoints) instead of tenant")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w\n%s", err, tenantsUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), tenantsUsage)
	}
	if *name == "" {
		return fmt.Errorf("--name is required\n%s", tenantsUsage)
	}
	if *credits < 0 {
		return fmt.Errorf("--credits must not be negative\n%s", tenantsUsage)
	}
	role := tenant.RoleTenant
	if *admin {
		role = tenant.RoleAdmin
	}

	var c tenant.Created
	err := inTx(ctx, func(ctx context.Context, tx pgx.Tx) (err error) {
		c, err = tenant.Create(ctx, tx, tenant.NewTenant{Name: *name, Priority: *priority, Credits: *credits}, role)
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "tenant_id: %s\nkey_id:    %s\nrole:      %s\napi_key:   %s\n", c.TenantID, c.KeyID, role, c.Key)
	fmt.Fprintln(os.Stderr, "The API key is shown only now: store it in your secret manager.")
	return nil
}

// runTenantQuota serves `adapter tenants quota`.
func runTenantQuota(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return errors.New(tenantsUsage)
	}
	id, err := uuid.Parse(args[0])
	if err != nil {
		return fmt.Errorf("tenant id %q is not a UUID\n%s", args[0], tenantsUsage)
	}
	fs := flag.NewFlagSet("tenants quota", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	assets := fs.String("max-assets", "", "most assets the tenant may keep, or default")
	bytes := fs.String("max-stored-bytes", "", "most bytes the tenant may keep, or default")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w\n%s", err, tenantsUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), tenantsUsage)
	}
	maxAssets, err := quotaFlag("--max-assets", *assets)
	if err != nil {
		return err
	}
	maxBytes, err := quotaFlag("--max-stored-bytes", *bytes)
	if err != nil {
		return err
	}
	if maxAssets == nil && maxBytes == nil {
		return fmt.Errorf("say --max-assets, --max-stored-bytes or both\n%s", tenantsUsage)
	}
	if err := inTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
		return asset.SetQuota(ctx, tx, id, maxAssets, maxBytes)
	}); err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "tenant_id: %s: quota set\n", id)
	return nil
}

// quotaFlag reads a limit: empty leaves it as it is (nil), "default" gives
// it back to the deployment's (-1), else a count of at least 0.
func quotaFlag(name, v string) (*int64, error) {
	switch v {
	case "":
		return nil, nil
	case "default":
		d := int64(-1)
		return &d, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("%s takes a whole number of at least 0, or default; got %q\n%s", name, v, tenantsUsage)
	}
	return &n, nil
}

// inTx runs fn in one transaction on DATABASE_URL, within 30 s.
func inTx(ctx context.Context, fn func(context.Context, pgx.Tx) error) error {
	var cfg config.Migrate
	if err := config.Load(&cfg); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, cfg.URL)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return fn(ctx, tx) })
}
