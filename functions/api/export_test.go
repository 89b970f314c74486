package api

// MaxStreamsPerTenant lets the external tests fill a tenant's streams.
const MaxStreamsPerTenant = maxStreamsPerTenant
