package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/tenant"
)

const tenantsUsage = "usage: adapter tenants create --name N --credits C [--priority P] [--admin]"

// runTenants serves `adapter tenants create`: a tenant, its credit account
// and its first API key, printed once. Only the key's hash is stored, so
// the key cannot be shown again; a lost key is replaced by a new one.
func runTenants(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New(tenantsUsage)
	}
	fs := flag.NewFlagSet("tenants create", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error returned says what is wrong
	name := fs.String("name", "", "tenant name (required)")
	credits := fs.Int64("credits", 0, "starting credits")
	priority := fs.Int("priority", 0, "scheduling priority; higher runs first when capacity is short")
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
	var c tenant.Created
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
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
