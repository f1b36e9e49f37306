-- The OML helper functions (spec §8.11.4) as temporary functions of each
-- PostgreSQL connection, for lookups that apply them to columns. Results match
-- the guest's omlet_lang::pipes::helper: 0 for a bad address, NULL for a bad
-- CIDR or an out-of-range integer. Value-only calls are computed in the guest.

-- An address as a number, or NULL when it is not one (dotted quad or integer).
create or replace function pg_temp.ip4_value(t text) returns bigint language sql immutable as $f$
  select case
    when t is null or t !~ '^\s*[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\s*$' then null
    when split_part(trim(t), '.', 1)::int > 255 or split_part(trim(t), '.', 2)::int > 255
      or split_part(trim(t), '.', 3)::int > 255 or split_part(trim(t), '.', 4)::int > 255 then null
    else (split_part(trim(t), '.', 1)::bigint << 24) + (split_part(trim(t), '.', 2)::bigint << 16)
       + (split_part(trim(t), '.', 3)::bigint << 8) + split_part(trim(t), '.', 4)::bigint
  end $f$;
create or replace function pg_temp.ip4_value(n bigint) returns bigint language sql immutable as $f$
  select case when n between 0 and 4294967295 then n end $f$;
create or replace function pg_temp.ip4_int(t text) returns bigint language sql immutable as $f$
  select coalesce(pg_temp.ip4_value(t), 0) $f$;
create or replace function pg_temp.ip4_int(n bigint) returns bigint language sql immutable as $f$
  select coalesce(pg_temp.ip4_value(n), 0) $f$;
create or replace function pg_temp.ip4_between(ip text, lo text, hi text) returns int language sql immutable as $f$
  select coalesce((pg_temp.ip4_value(ip) between pg_temp.ip4_value(lo) and pg_temp.ip4_value(hi))::int, 0) $f$;
create or replace function pg_temp.ip4_between(ip text, lo bigint, hi bigint) returns int language sql immutable as $f$
  select coalesce((pg_temp.ip4_value(ip) between pg_temp.ip4_value(lo) and pg_temp.ip4_value(hi))::int, 0) $f$;
create or replace function pg_temp.ip4_between(ip bigint, lo bigint, hi bigint) returns int language sql immutable as $f$
  select coalesce((pg_temp.ip4_value(ip) between pg_temp.ip4_value(lo) and pg_temp.ip4_value(hi))::int, 0) $f$;
create or replace function pg_temp.cidr4_min(c text) returns bigint language sql immutable as $f$
  select case
    when c is null or c !~ '^\s*[0-9.]+/[0-9]{1,2}\s*$' then null
    when split_part(trim(c), '/', 2)::int > 32 then null
    when pg_temp.ip4_value(split_part(trim(c), '/', 1)) is null then null
    when split_part(trim(c), '/', 2)::int = 0 then 0
    else pg_temp.ip4_int(split_part(trim(c), '/', 1))
       & ((4294967295::bigint << (32 - split_part(trim(c), '/', 2)::int)) & 4294967295)
  end $f$;
create or replace function pg_temp.cidr4_max(c text) returns bigint language sql immutable as $f$
  select case
    when pg_temp.cidr4_min(c) is null then null
    when split_part(trim(c), '/', 2)::int = 0 then 4294967295
    else pg_temp.ip4_int(split_part(trim(c), '/', 1))
       | (~(4294967295::bigint << (32 - split_part(trim(c), '/', 2)::int)) & 4294967295)
  end $f$;
create or replace function pg_temp.cidr4_contains(ip text, c text) returns int language sql immutable as $f$
  select case
    when ip is null or ip !~ '^\s*[0-9]{1,3}(\.[0-9]{1,3}){3}\s*$' or pg_temp.cidr4_min(c) is null then 0
    else (pg_temp.ip4_int(ip) between pg_temp.cidr4_min(c) and pg_temp.cidr4_max(c))::int
  end $f$;
create or replace function pg_temp.ip4_text(n bigint) returns text language sql immutable as $f$
  select case when n between 0 and 4294967295
    then concat_ws('.', (n >> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255) end $f$;
create or replace function pg_temp.trim_quotes(t text) returns text language sql immutable as $f$
  select case when length(t) >= 2 and left(t, 1) in ('"', '''') and right(t, 1) = left(t, 1)
    then substr(t, 2, length(t) - 2) else t end $f$;
