package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"
)

// TestUUIDCodecEncodesDirectly checks that a uuid.UUID parameter takes the
// direct binary plan (not pgx's driver.Valuer round trip through a string).
func TestUUIDCodecEncodesDirectly(t *testing.T) {
	m := pgtype.NewMap()
	m.RegisterType(&pgtype.Type{Name: "uuid", OID: pgtype.UUIDOID, Codec: uuidCodec{}})
	u := uuid.Must(uuid.NewV7())
	plan := m.PlanEncode(pgtype.UUIDOID, pgtype.BinaryFormatCode, u)
	if _, ok := plan.(encodeUUID); !ok {
		t.Fatalf("plan for uuid.UUID is %T, want encodeUUID", plan)
	}
	buf, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, u, []byte{1})
	if err != nil || !bytes.Equal(buf, append([]byte{1}, u[:]...)) {
		t.Fatalf("Encode = %x, %v; want 01%x", buf, err, u[:])
	}
	// Other values keep pgx's plans.
	if buf, err := m.Encode(pgtype.UUIDOID, pgtype.TextFormatCode, u, nil); err != nil || string(buf) != u.String() {
		t.Fatalf("Encode in the text format = %q, %v", buf, err)
	}
	if buf, err := m.Encode(pgtype.UUIDOID, pgtype.BinaryFormatCode, (*uuid.UUID)(nil), nil); err != nil || buf != nil {
		t.Fatalf("Encode of a nil *uuid.UUID = %x, %v; want NULL", buf, err)
	}
}

// TestUUIDParametersRoundTrip sends uuid parameters to PostgreSQL through a
// store connection and reads them back.
func TestUUIDParametersRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: no PostgreSQL")
	}
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable" // storetest.DefaultPostgresURL (an import cycle here)
	}
	ctx := context.Background()
	db, err := Open(ctx, url, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is required in CI: %v", err)
		}
		t.Skipf("PostgreSQL not reachable (set TEST_DATABASE_URL): %v", err)
	}
	defer db.Close()
	u := uuid.Must(uuid.NewV7())
	var got struct {
		Text string
		Same bool
		Null bool
	}
	var none *uuid.UUID
	err = db.gorm.Raw("SELECT ?::uuid::text AS text, ?::uuid = ?::uuid AS same, ?::uuid IS NULL AS null",
		u, u, u.String(), none).Scan(&got).Error
	if err != nil {
		t.Fatal(err)
	}
	if got.Text != u.String() || !got.Same || !got.Null {
		t.Fatalf("got %+v for %s", got, u)
	}
	// Every connection of the pool has the codec (registered on connect).
	sqlDB, err := db.gorm.DB()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		typ, ok := dc.(*stdlib.Conn).Conn().TypeMap().TypeForOID(pgtype.UUIDOID)
		if !ok {
			return errors.New("no uuid type")
		}
		if _, ok := typ.Codec.(uuidCodec); !ok {
			return fmt.Errorf("uuid codec is %T, want uuidCodec", typ.Codec)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
