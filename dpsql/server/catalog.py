"""Catalog emulation: pg_catalog and information_schema answered from schema and policy only.

Clients browse with catalog queries (psql \\d, JDBC DatabaseMetaData, ODBC SQLTables,
SQLAlchemy reflection). They run here on a separate in-memory DuckDB that holds tables shaped
like PostgreSQL 15's catalogs, filled from the engine's schema and the policy: names, types,
comments. It holds no row of data; statistics answer NULL or nothing (pg_class.reltuples is -1,
as for a never-analyzed table). The client's SQL is rewritten onto these tables, PostgreSQL
functions become macros, and result column types are PostgreSQL's own.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any, Mapping

import duckdb
import sqlglot
from sqlglot import exp

from .. import __version__
from ..config import Policy
from ..duck_rows import insert_rows
from ..errors import Error, ProgrammingError
from ..sql.classify import first_word
from . import codec as c

log = logging.getLogger(__name__)

PUBLIC, PG_CATALOG, INFORMATION_SCHEMA = 2200, 11, 13000
PG_TEMP, PG_TEMP_NAME = 16000, "pg_temp_3"  # where a session's temporary views are listed
FIRST_VIEW_OID = 40000
FIRST_FUNCTION_OID = 50000
FIRST_IO_FUNCTION_OID = 51000
# The functions a query may use (sql/allowlist.py), listed in pg_proc and
# information_schema.routines so SQL editors complete them: (name, return type, aggregate).
_FUNCTIONS = [(name, c.FLOAT8, True) for name in ("avg", "stddev", "stddev_pop", "stddev_samp", "variance", "var_pop",
                                                  "var_samp", "median", "percentile_cont", "percentile_disc")] + [
    ("count", c.INT8, True), ("sum", c.NUMERIC, True), ("min", c.NUMERIC, True), ("max", c.NUMERIC, True)] + [
    (name, c.FLOAT8, False) for name in ("abs", "round", "floor", "ceil", "sign", "sqrt", "ln", "log", "exp", "power",
                                         "least", "greatest")] + [
    (name, c.TEXT, False) for name in ("coalesce", "nullif", "lower", "upper", "substring", "trim", "concat", "left",
                                       "right", "initcap")] + [
    ("length", c.INT4, False), ("strpos", c.INT4, False), ("width_bucket", c.INT4, False),
    ("extract", c.NUMERIC, False), ("date_trunc", c.TIMESTAMP, False), ("current_date", c.DATE, False)]
FIRST_TABLE_OID = 16385
OWNER = 10
DATABASE_OID = 16384

# (column, PostgreSQL type OID). DuckDB storage types follow from the OID.
TABLES: dict[str, list[tuple[str, int]]] = {
    # a set-returning function read as a table (DBeaver asks for the keywords on connect)
    "pg_get_keywords": [("word", c.TEXT), ("catcode", c.CHAR), ("barelabel", c.BOOL), ("catdesc", c.TEXT),
                        ("baredesc", c.TEXT)],
    "pg_namespace": [("oid", c.OID), ("nspname", c.NAME), ("nspowner", c.OID), ("nspacl", c.ACLITEM_ARRAY)],
    "pg_class": [("oid", c.OID), ("relname", c.NAME), ("relnamespace", c.OID), ("reltype", c.OID),
        ("reloftype", c.OID), ("relowner", c.OID), ("relam", c.OID), ("relfilenode", c.OID),
        ("reltablespace", c.OID), ("relpages", c.INT4), ("reltuples", c.FLOAT4), ("relallvisible", c.INT4),
        ("reltoastrelid", c.OID), ("relhasindex", c.BOOL), ("relisshared", c.BOOL), ("relpersistence", c.CHAR),
        ("relkind", c.CHAR), ("relnatts", c.INT2), ("relchecks", c.INT2), ("relhasrules", c.BOOL),
        ("relhastriggers", c.BOOL), ("relhassubclass", c.BOOL), ("relrowsecurity", c.BOOL),
        ("relforcerowsecurity", c.BOOL), ("relispopulated", c.BOOL), ("relreplident", c.CHAR),
        ("relispartition", c.BOOL), ("relrewrite", c.OID), ("relacl", c.ACLITEM_ARRAY), ("reloptions", c.TEXT_ARRAY),
        ("relpartbound", c.TEXT), ("relfrozenxid", c.TEXT), ("relminmxid", c.TEXT)],
    "pg_attribute": [("attrelid", c.OID), ("attname", c.NAME), ("atttypid", c.OID), ("attstattarget", c.INT4),
        ("attlen", c.INT2), ("attnum", c.INT2), ("attndims", c.INT4), ("attcacheoff", c.INT4), ("atttypmod", c.INT4),
        ("attbyval", c.BOOL), ("attalign", c.CHAR), ("attstorage", c.CHAR), ("attcompression", c.CHAR),
        ("attnotnull", c.BOOL), ("atthasdef", c.BOOL), ("atthasmissing", c.BOOL), ("attidentity", c.CHAR),
        ("attgenerated", c.CHAR), ("attisdropped", c.BOOL), ("attislocal", c.BOOL), ("attinhcount", c.INT4),
        ("attcollation", c.OID), ("attacl", c.ACLITEM_ARRAY), ("attoptions", c.TEXT_ARRAY),
        ("attfdwoptions", c.TEXT_ARRAY), ("attmissingval", c.TEXT)],
    "pg_type": [("oid", c.OID), ("typname", c.NAME), ("typnamespace", c.OID), ("typowner", c.OID),
        ("typlen", c.INT2), ("typbyval", c.BOOL), ("typtype", c.CHAR), ("typcategory", c.CHAR),
        ("typispreferred", c.BOOL), ("typisdefined", c.BOOL), ("typdelim", c.CHAR), ("typrelid", c.OID),
        ("typelem", c.OID), ("typarray", c.OID), ("typinput", c.REGPROC), ("typoutput", c.REGPROC),
        ("typreceive", c.REGPROC), ("typsend", c.REGPROC), ("typbasetype", c.OID), ("typtypmod", c.INT4),
        ("typndims", c.INT4), ("typcollation", c.OID), ("typnotnull", c.BOOL), ("typalign", c.CHAR),
        ("typstorage", c.CHAR), ("typdefault", c.TEXT), ("typsubscript", c.REGPROC), ("typmodin", c.REGPROC),
        ("typmodout", c.REGPROC), ("typanalyze", c.REGPROC), ("typdefaultbin", c.TEXT), ("typacl", c.ACLITEM_ARRAY)],
    "pg_database": [("oid", c.OID), ("datname", c.NAME), ("datdba", c.OID), ("encoding", c.INT4),
        ("datlocprovider", c.CHAR), ("datistemplate", c.BOOL), ("datallowconn", c.BOOL), ("datconnlimit", c.INT4),
        ("datcollate", c.TEXT), ("datctype", c.TEXT), ("daticulocale", c.TEXT), ("datcollversion", c.TEXT),
        ("datacl", c.ACLITEM_ARRAY), ("dattablespace", c.OID), ("datfrozenxid", c.TEXT), ("datminmxid", c.TEXT)],
    "pg_roles": [("oid", c.OID), ("rolname", c.NAME), ("rolsuper", c.BOOL), ("rolinherit", c.BOOL),
                 ("rolcreaterole", c.BOOL), ("rolcreatedb", c.BOOL), ("rolcanlogin", c.BOOL), ("rolreplication", c.BOOL),
                 ("rolconnlimit", c.INT4), ("rolbypassrls", c.BOOL), ("rolconfig", c.TEXT_ARRAY),
                 ("rolpassword", c.TEXT), ("rolvaliduntil", c.TIMESTAMPTZ)],
    "pg_user": [("usename", c.NAME), ("usesysid", c.OID), ("usecreatedb", c.BOOL), ("usesuper", c.BOOL),
        ("userepl", c.BOOL), ("usebypassrls", c.BOOL), ("useconfig", c.TEXT_ARRAY), ("passwd", c.TEXT),
        ("valuntil", c.TIMESTAMPTZ)],
    "pg_am": [("oid", c.OID), ("amname", c.NAME), ("amhandler", c.REGPROC), ("amtype", c.CHAR)],
    "pg_index": [("indexrelid", c.OID), ("indrelid", c.OID), ("indnatts", c.INT2), ("indnkeyatts", c.INT2),
                 ("indisunique", c.BOOL), ("indnullsnotdistinct", c.BOOL), ("indisprimary", c.BOOL),
                 ("indisexclusion", c.BOOL), ("indimmediate", c.BOOL), ("indisclustered", c.BOOL),
                 ("indisvalid", c.BOOL), ("indcheckxmin", c.BOOL), ("indisready", c.BOOL), ("indislive", c.BOOL),
                 ("indisreplident", c.BOOL), ("indkey", c.INT2VECTOR), ("indcollation", c.OIDVECTOR),
                 ("indclass", c.OIDVECTOR), ("indoption", c.INT2VECTOR), ("indexprs", c.TEXT), ("indpred", c.TEXT)],
    "pg_constraint": [("oid", c.OID), ("conname", c.NAME), ("connamespace", c.OID), ("contype", c.CHAR),
        ("condeferrable", c.BOOL), ("condeferred", c.BOOL), ("convalidated", c.BOOL), ("conrelid", c.OID),
        ("contypid", c.OID), ("conindid", c.OID), ("conparentid", c.OID), ("confrelid", c.OID),
        ("confupdtype", c.CHAR), ("confdeltype", c.CHAR), ("confmatchtype", c.CHAR), ("conislocal", c.BOOL),
        ("coninhcount", c.INT4), ("connoinherit", c.BOOL), ("conkey", c.INT2_ARRAY), ("confkey", c.INT2_ARRAY),
        ("conbin", c.TEXT), ("conpfeqop", c.OID_ARRAY), ("conppeqop", c.OID_ARRAY), ("conffeqop", c.OID_ARRAY),
        ("confdelsetcols", c.INT2_ARRAY), ("conexclop", c.OID_ARRAY)],
    "pg_attrdef": [("oid", c.OID), ("adrelid", c.OID), ("adnum", c.INT2), ("adbin", c.TEXT)],
    "pg_description": [("objoid", c.OID), ("classoid", c.OID), ("objsubid", c.INT4), ("description", c.TEXT)],
    "pg_inherits": [("inhrelid", c.OID), ("inhparent", c.OID), ("inhseqno", c.INT4), ("inhdetachpending", c.BOOL)],
    "pg_tablespace": [("oid", c.OID), ("spcname", c.NAME), ("spcowner", c.OID), ("spcacl", c.ACLITEM_ARRAY),
        ("spcoptions", c.TEXT_ARRAY)],
    # Empty: dpsql exposes no functions of its own. pgcli's completion loader reads these columns.
    "pg_proc": [("oid", c.OID), ("proname", c.NAME), ("pronamespace", c.OID), ("prorettype", c.OID),
        ("prokind", c.CHAR), ("proargnames", c.TEXT_ARRAY), ("proallargtypes", c.OID_ARRAY),
        ("proargtypes", c.OID_ARRAY), ("proargmodes", c.CHAR_ARRAY), ("proretset", c.BOOL),
        ("proargdefaults", c.TEXT), ("prosrc", c.TEXT), ("prolang", c.OID), ("proisagg", c.BOOL),
        ("proiswindow", c.BOOL), ("proowner", c.OID), ("procost", c.FLOAT4), ("prorows", c.FLOAT4),
        ("provariadic", c.OID), ("prosupport", c.REGPROC), ("prosecdef", c.BOOL), ("proleakproof", c.BOOL),
        ("proisstrict", c.BOOL), ("provolatile", c.CHAR), ("proparallel", c.CHAR), ("pronargs", c.INT2),
        ("pronargdefaults", c.INT2), ("protrftypes", c.OID_ARRAY), ("probin", c.TEXT), ("prosqlbody", c.TEXT),
        ("proconfig", c.TEXT_ARRAY), ("proacl", c.ACLITEM_ARRAY)],
    "pg_language": [("oid", c.OID), ("lanname", c.NAME), ("lanowner", c.OID), ("lanispl", c.BOOL),
        ("lanpltrusted", c.BOOL), ("lanplcallfoid", c.OID), ("laninline", c.OID), ("lanvalidator", c.OID),
        ("lanacl", c.ACLITEM_ARRAY)],
    "pg_settings": [("name", c.TEXT), ("setting", c.TEXT), ("unit", c.TEXT), ("category", c.TEXT),
        ("short_desc", c.TEXT), ("extra_desc", c.TEXT), ("context", c.TEXT), ("vartype", c.TEXT), ("source", c.TEXT),
        ("min_val", c.TEXT), ("max_val", c.TEXT), ("enumvals", c.TEXT_ARRAY), ("boot_val", c.TEXT),
        ("reset_val", c.TEXT), ("sourcefile", c.TEXT), ("sourceline", c.INT4), ("pending_restart", c.BOOL)],
    "pg_stats": [("schemaname", c.NAME), ("tablename", c.NAME), ("attname", c.NAME), ("inherited", c.BOOL),
        ("null_frac", c.FLOAT4), ("avg_width", c.INT4), ("n_distinct", c.FLOAT4), ("most_common_vals", c.TEXT),
        ("most_common_freqs", c.TEXT), ("histogram_bounds", c.TEXT), ("correlation", c.FLOAT4),
        ("most_common_elems", c.TEXT), ("most_common_elem_freqs", c.TEXT), ("elem_count_histogram", c.TEXT)],
    "pg_stat_user_tables": [("relid", c.OID), ("schemaname", c.NAME), ("relname", c.NAME), ("seq_scan", c.INT8),
        ("seq_tup_read", c.INT8), ("idx_scan", c.INT8), ("idx_tup_fetch", c.INT8), ("n_tup_ins", c.INT8),
        ("n_tup_upd", c.INT8), ("n_tup_del", c.INT8), ("n_tup_hot_upd", c.INT8), ("n_live_tup", c.INT8),
        ("n_dead_tup", c.INT8), ("n_mod_since_analyze", c.INT8), ("n_ins_since_vacuum", c.INT8),
        ("last_vacuum", c.TIMESTAMPTZ), ("last_autovacuum", c.TIMESTAMPTZ), ("last_analyze", c.TIMESTAMPTZ),
        ("last_autoanalyze", c.TIMESTAMPTZ), ("vacuum_count", c.INT8), ("autovacuum_count", c.INT8),
        ("analyze_count", c.INT8), ("autoanalyze_count", c.INT8)],
    "pg_statistic_ext": [("oid", c.OID), ("stxrelid", c.OID), ("stxname", c.NAME), ("stxnamespace", c.OID),
        ("stxowner", c.OID), ("stxstattarget", c.INT4), ("stxkeys", c.INT2VECTOR), ("stxkind", c.CHAR_ARRAY),
        ("stxexprs", c.TEXT)],
    "pg_policy": [("oid", c.OID), ("polname", c.NAME), ("polrelid", c.OID), ("polcmd", c.CHAR),
                  ("polpermissive", c.BOOL), ("polroles", c.OID_ARRAY), ("polqual", c.TEXT), ("polwithcheck", c.TEXT)],
    "pg_publication": [("oid", c.OID), ("pubname", c.NAME), ("pubowner", c.OID), ("puballtables", c.BOOL),
        ("pubinsert", c.BOOL), ("pubupdate", c.BOOL), ("pubdelete", c.BOOL), ("pubtruncate", c.BOOL),
        ("pubviaroot", c.BOOL)],
    "pg_publication_namespace": [("oid", c.OID), ("pnpubid", c.OID), ("pnnspid", c.OID)],
    "pg_publication_rel": [("oid", c.OID), ("prpubid", c.OID), ("prrelid", c.OID), ("prqual", c.TEXT), ("prattrs", c.INT2_ARRAY)],
    "pg_trigger": [("oid", c.OID), ("tgrelid", c.OID), ("tgparentid", c.OID), ("tgname", c.NAME), ("tgfoid", c.OID),
        ("tgtype", c.INT2), ("tgenabled", c.CHAR), ("tgisinternal", c.BOOL), ("tgconstrrelid", c.OID),
        ("tgconstrindid", c.OID), ("tgconstraint", c.OID), ("tgdeferrable", c.BOOL), ("tginitdeferred", c.BOOL),
        ("tgnargs", c.INT2), ("tgattr", c.INT2VECTOR), ("tgargs", c.BYTEA), ("tgqual", c.TEXT),
        ("tgoldtable", c.NAME), ("tgnewtable", c.NAME)],
    "pg_rewrite": [("oid", c.OID), ("rulename", c.NAME), ("ev_class", c.OID), ("ev_type", c.CHAR),
        ("ev_enabled", c.CHAR), ("is_instead", c.BOOL), ("ev_qual", c.TEXT), ("ev_action", c.TEXT)],
    "pg_opclass": [("oid", c.OID), ("opcmethod", c.OID), ("opcname", c.NAME), ("opcnamespace", c.OID),
                   ("opcowner", c.OID), ("opcfamily", c.OID), ("opcintype", c.OID), ("opcdefault", c.BOOL), ("opckeytype", c.OID)],
    "pg_collation": [("oid", c.OID), ("collname", c.NAME), ("collnamespace", c.OID), ("collowner", c.OID),
        ("collprovider", c.CHAR), ("collisdeterministic", c.BOOL), ("collencoding", c.INT4), ("collcollate", c.TEXT),
        ("collctype", c.TEXT), ("colliculocale", c.TEXT), ("collversion", c.TEXT)],
    "pg_enum": [("oid", c.OID), ("enumtypid", c.OID), ("enumsortorder", c.FLOAT4), ("enumlabel", c.NAME)],
    "pg_extension": [("oid", c.OID), ("extname", c.NAME), ("extowner", c.OID), ("extnamespace", c.OID),
        ("extrelocatable", c.BOOL), ("extversion", c.TEXT), ("extconfig", c.OID_ARRAY),
        ("extcondition", c.TEXT_ARRAY)],
    "pg_range": [("rngtypid", c.OID), ("rngsubtype", c.OID), ("rngmultitypid", c.OID), ("rngcollation", c.OID),
                 ("rngsubopc", c.OID), ("rngcanonical", c.REGPROC), ("rngsubdiff", c.REGPROC)],
    "pg_sequence": [("seqrelid", c.OID), ("seqtypid", c.OID), ("seqstart", c.INT8), ("seqincrement", c.INT8),
        ("seqmax", c.INT8), ("seqmin", c.INT8), ("seqcache", c.INT8), ("seqcycle", c.BOOL)],
    "pg_foreign_table": [("ftrelid", c.OID), ("ftserver", c.OID), ("ftoptions", c.TEXT_ARRAY)],
    "pg_partitioned_table": [("partrelid", c.OID), ("partstrat", c.CHAR)],
    "pg_depend": [("classid", c.OID), ("objid", c.OID), ("objsubid", c.INT4), ("refclassid", c.OID),
                  ("refobjid", c.OID), ("refobjsubid", c.INT4), ("deptype", c.CHAR)],
    "pg_event_trigger": [("oid", c.OID), ("evtname", c.NAME), ("evtevent", c.NAME), ("evtowner", c.OID),
        ("evtfoid", c.OID), ("evtenabled", c.CHAR), ("evttags", c.TEXT_ARRAY)],
    "pg_matviews": [("schemaname", c.NAME), ("matviewname", c.NAME), ("definition", c.TEXT)],
    "pg_views": [("schemaname", c.NAME), ("viewname", c.NAME), ("definition", c.TEXT)],
    "pg_tables": [("schemaname", c.NAME), ("tablename", c.NAME), ("tableowner", c.NAME), ("tablespace", c.NAME),
                  ("hasindexes", c.BOOL), ("hasrules", c.BOOL), ("hastriggers", c.BOOL), ("rowsecurity", c.BOOL)],
    # information_schema (stored as is_<name>)
    "is_schemata": [("catalog_name", c.NAME), ("schema_name", c.NAME), ("schema_owner", c.NAME)],
    # Empty: dpsql has no role memberships and no user-defined routines.
    "pg_auth_members": [("oid", c.OID), ("roleid", c.OID), ("member", c.OID), ("grantor", c.OID), ("admin_option", c.BOOL)],
    "is_routines": [("specific_catalog", c.NAME), ("specific_schema", c.NAME), ("specific_name", c.NAME),
                    ("routine_catalog", c.NAME), ("routine_schema", c.NAME), ("routine_name", c.NAME),
                    ("routine_type", c.TEXT), ("data_type", c.TEXT), ("type_udt_name", c.NAME),
                    ("routine_body", c.TEXT), ("routine_definition", c.TEXT), ("external_language", c.TEXT),
                    ("is_deterministic", c.TEXT), ("security_type", c.TEXT)],
    "is_tables": [("table_catalog", c.NAME), ("table_schema", c.NAME), ("table_name", c.NAME),
        ("table_type", c.VARCHAR), ("self_referencing_column_name", c.NAME), ("reference_generation", c.VARCHAR),
        ("user_defined_type_catalog", c.NAME), ("user_defined_type_schema", c.NAME),
        ("user_defined_type_name", c.NAME), ("is_insertable_into", c.VARCHAR), ("is_typed", c.VARCHAR),
        ("commit_action", c.VARCHAR)],
    "is_columns": [("table_catalog", c.NAME), ("table_schema", c.NAME), ("table_name", c.NAME),
        ("column_name", c.NAME), ("ordinal_position", c.INT4), ("column_default", c.VARCHAR),
        ("is_nullable", c.VARCHAR), ("data_type", c.VARCHAR), ("character_maximum_length", c.INT4),
        ("character_octet_length", c.INT4), ("numeric_precision", c.INT4), ("numeric_precision_radix", c.INT4),
        ("numeric_scale", c.INT4), ("datetime_precision", c.INT4), ("interval_type", c.VARCHAR),
        ("interval_precision", c.INT4), ("character_set_catalog", c.NAME), ("character_set_schema", c.NAME),
        ("character_set_name", c.NAME), ("collation_catalog", c.NAME), ("collation_schema", c.NAME),
        ("collation_name", c.NAME), ("domain_catalog", c.NAME), ("domain_schema", c.NAME), ("domain_name", c.NAME),
        ("udt_catalog", c.NAME), ("udt_schema", c.NAME), ("udt_name", c.NAME), ("scope_catalog", c.NAME),
        ("scope_schema", c.NAME), ("scope_name", c.NAME), ("maximum_cardinality", c.INT4),
        ("dtd_identifier", c.NAME), ("is_self_referencing", c.VARCHAR), ("is_identity", c.VARCHAR),
        ("identity_generation", c.VARCHAR), ("identity_start", c.VARCHAR), ("identity_increment", c.VARCHAR),
        ("identity_maximum", c.VARCHAR), ("identity_minimum", c.VARCHAR), ("identity_cycle", c.VARCHAR),
        ("is_generated", c.VARCHAR), ("generation_expression", c.VARCHAR), ("is_updatable", c.VARCHAR)],
    "is_views": [("table_catalog", c.NAME), ("table_schema", c.NAME), ("table_name", c.NAME), ("view_definition", c.TEXT)],
    "is_table_constraints": [("constraint_catalog", c.NAME), ("constraint_schema", c.NAME),
        ("constraint_name", c.NAME), ("table_catalog", c.NAME), ("table_schema", c.NAME), ("table_name", c.NAME),
        ("constraint_type", c.VARCHAR), ("is_deferrable", c.VARCHAR), ("initially_deferred", c.VARCHAR),
        ("enforced", c.VARCHAR), ("nulls_distinct", c.VARCHAR)],
    "is_key_column_usage": [("constraint_catalog", c.NAME), ("constraint_schema", c.NAME),
        ("constraint_name", c.NAME), ("table_catalog", c.NAME), ("table_schema", c.NAME), ("table_name", c.NAME),
        ("column_name", c.NAME), ("ordinal_position", c.INT4), ("position_in_unique_constraint", c.INT4)],
    # Empty: dpsql declares no keys or indexes (peewee's and Django's introspection read them).
    "is_constraint_column_usage": [("table_catalog", c.NAME), ("table_schema", c.NAME), ("table_name", c.NAME),
        ("column_name", c.NAME), ("constraint_catalog", c.NAME), ("constraint_schema", c.NAME),
        ("constraint_name", c.NAME)],
    "is_referential_constraints": [("constraint_catalog", c.NAME), ("constraint_schema", c.NAME),
        ("constraint_name", c.NAME), ("unique_constraint_catalog", c.NAME), ("unique_constraint_schema", c.NAME),
        ("unique_constraint_name", c.NAME), ("match_option", c.VARCHAR), ("update_rule", c.VARCHAR),
        ("delete_rule", c.VARCHAR)],
    "pg_indexes": [("schemaname", c.NAME), ("tablename", c.NAME), ("indexname", c.NAME), ("tablespace", c.NAME),
        ("indexdef", c.TEXT)],

}

# Catalog tables and views that are empty here (dpsql has none of these objects, or shows none:
# other sessions' activity and locks are not an analyst's business), read by pgAdmin's tree and
# dashboard and by drivers: "table column:type ...", PostgreSQL 15's columns, a line continued
# by indented ones; a type is a codec constant's name.
_EMPTY_TABLES = """
pg_seclabels objoid:oid classoid:oid objsubid:int4 objtype:text objnamespace:oid objname:text provider:text
    label:text
pg_seclabel objoid:oid classoid:oid objsubid:int4 provider:text label:text
pg_cast oid:oid castsource:oid casttarget:oid castfunc:oid castcontext:char castmethod:char
pg_default_acl oid:oid defaclrole:oid defaclnamespace:oid defaclobjtype:char defaclacl:aclitem_array
pg_stat_activity datid:oid datname:name pid:int4 leader_pid:int4 usesysid:oid usename:name application_name:text
    client_addr:text client_hostname:text client_port:int4 backend_start:timestamptz xact_start:timestamptz
    query_start:timestamptz state_change:timestamptz wait_event_type:text wait_event:text state:text
    backend_xid:text backend_xmin:text query_id:int8 query:text backend_type:text
pg_shdescription objoid:oid classoid:oid description:text
pg_ts_template oid:oid tmplname:name tmplnamespace:oid tmplinit:regproc tmpllexize:regproc
pg_ts_parser oid:oid prsname:name prsnamespace:oid prsstart:regproc prstoken:regproc prsend:regproc
    prsheadline:regproc prslextype:regproc
pg_ts_dict oid:oid dictname:name dictnamespace:oid dictowner:oid dicttemplate:oid dictinitoption:text
pg_ts_config oid:oid cfgname:name cfgnamespace:oid cfgowner:oid cfgparser:oid
pg_subscription oid:oid subdbid:oid subskiplsn:text subname:name subowner:oid subenabled:bool subbinary:bool
    substream:bool subtwophasestate:char subdisableonerr:bool subconninfo:text subslotname:name subsynccommit:text
    subpublications:text_array
pg_stat_gssapi pid:int4 gss_authenticated:bool principal:text encrypted:bool
pg_replication_slots slot_name:name plugin:name slot_type:text datoid:oid database:name temporary:bool active:bool
    active_pid:int4 xmin:text catalog_xmin:text restart_lsn:text confirmed_flush_lsn:text wal_status:text
    safe_wal_size:int8 two_phase:bool
pg_prepared_xacts transaction:text gid:text prepared:timestamptz owner:name database:name
pg_operator oid:oid oprname:name oprnamespace:oid oprowner:oid oprkind:char oprcanmerge:bool oprcanhash:bool
    oprleft:oid oprright:oid oprresult:oid oprcom:oid oprnegate:oid oprcode:regproc oprrest:regproc oprjoin:regproc
pg_locks locktype:text database:oid relation:oid page:int4 tuple:int2 virtualxid:text transactionid:text classid:oid
    objid:oid objsubid:int2 virtualtransaction:text pid:int4 mode:text granted:bool fastpath:bool
    waitstart:timestamptz
pg_foreign_data_wrapper oid:oid fdwname:name fdwowner:oid fdwhandler:oid fdwvalidator:oid fdwacl:aclitem_array
    fdwoptions:text_array
pg_db_role_setting setdatabase:oid setrole:oid setconfig:text_array
pg_aggregate aggfnoid:regproc aggkind:char aggnumdirectargs:int2 aggtransfn:regproc aggfinalfn:regproc
    aggcombinefn:regproc aggserialfn:regproc aggdeserialfn:regproc aggmtransfn:regproc aggminvtransfn:regproc
    aggmfinalfn:regproc aggfinalextra:bool aggmfinalextra:bool aggfinalmodify:char aggmfinalmodify:char
    aggsortop:oid aggtranstype:oid aggtransspace:int4 aggmtranstype:oid aggmtransspace:int4 agginitval:text
    aggminitval:text
pg_available_extensions name:name default_version:text comment:text
pg_foreign_server oid:oid srvname:name srvowner:oid srvfdw:oid srvtype:text srvversion:text srvacl:aclitem_array
    srvoptions:text_array
pg_user_mapping oid:oid umuser:oid umserver:oid umoptions:text_array
pg_stat_database datid:oid datname:name numbackends:int4 xact_commit:int8 xact_rollback:int8 blks_read:int8
    blks_hit:int8 tup_returned:int8 tup_fetched:int8 tup_inserted:int8 tup_updated:int8 tup_deleted:int8
    conflicts:int8 temp_files:int8 temp_bytes:int8 deadlocks:int8 checksum_failures:int8
    checksum_last_failure:timestamptz blk_read_time:float8 blk_write_time:float8 session_time:float8
    active_time:float8 idle_in_transaction_time:float8 sessions:int8 sessions_abandoned:int8 sessions_fatal:int8
    sessions_killed:int8 stats_reset:timestamptz
pg_sequences schemaname:name sequencename:name sequenceowner:name data_type:regtype start_value:int8 min_value:int8
    max_value:int8 increment_by:int8 cycle:bool cache_size:int8 last_value:int8
pg_stat_ssl pid:int4 ssl:bool version:text cipher:text bits:int4 client_dn:text client_serial:numeric issuer_dn:text
pg_shseclabel objoid:oid classoid:oid provider:text label:text
pg_init_privs objoid:oid classoid:oid objsubid:int4 privtype:char initprivs:aclitem_array
pg_transform oid:oid trftype:oid trflang:oid trffromsql:regproc trftosql:regproc
pg_conversion oid:oid conname:name connamespace:oid conowner:oid conforencoding:int4 contoencoding:int4
    conproc:regproc condefault:bool
pg_opfamily oid:oid opfmethod:oid opfname:name opfnamespace:oid opfowner:oid
pg_amop oid:oid amopfamily:oid amoplefttype:oid amoprighttype:oid amopstrategy:int2 amoppurpose:char amopopr:oid
    amopmethod:oid amopsortfamily:oid
pg_amproc oid:oid amprocfamily:oid amproclefttype:oid amprocrighttype:oid amprocnum:int2 amproc:regproc
pg_statistic_ext_data stxoid:oid stxdinherit:bool stxdndistinct:text stxddependencies:text stxdmcv:text
    stxdexpr:text
pg_stat_replication pid:int4 usesysid:oid usename:name application_name:text client_addr:text client_hostname:text
    client_port:int4 backend_start:timestamptz backend_xmin:text state:text sent_lsn:text write_lsn:text
    flush_lsn:text replay_lsn:text write_lag:interval flush_lag:interval replay_lag:interval sync_priority:int4
    sync_state:text reply_time:timestamptz
pg_stat_subscription subid:oid subname:name pid:int4 relid:oid received_lsn:text last_msg_send_time:timestamptz
    last_msg_receipt_time:timestamptz latest_end_lsn:text latest_end_time:timestamptz
pg_ts_config_map mapcfg:oid maptokentype:int4 mapseqno:int4 mapdict:oid
pg_largeobject_metadata oid:oid lomowner:oid lomacl:aclitem_array
pg_show_all_settings name:text setting:text unit:text category:text short_desc:text extra_desc:text context:text
    vartype:text source:text min_val:text max_val:text enumvals:text_array boot_val:text reset_val:text
    sourcefile:text sourceline:int4 pending_restart:bool
pg_stat_all_tables relid:oid schemaname:name relname:name seq_scan:int8 seq_tup_read:int8 idx_scan:int8
    idx_tup_fetch:int8 n_tup_ins:int8 n_tup_upd:int8 n_tup_del:int8 n_tup_hot_upd:int8 n_live_tup:int8
    n_dead_tup:int8 n_mod_since_analyze:int8 n_ins_since_vacuum:int8 last_vacuum:timestamptz
    last_autovacuum:timestamptz last_analyze:timestamptz last_autoanalyze:timestamptz vacuum_count:int8
    autovacuum_count:int8 analyze_count:int8 autoanalyze_count:int8
pg_shdepend dbid:oid classid:oid objid:oid objsubid:int4 refclassid:oid refobjid:oid deptype:char
pg_statio_all_tables relid:oid schemaname:name relname:name heap_blks_read:int8 heap_blks_hit:int8
    idx_blks_read:int8 idx_blks_hit:int8 toast_blks_read:int8 toast_blks_hit:int8 tidx_blks_read:int8
    tidx_blks_hit:int8
pg_stat_all_indexes relid:oid indexrelid:oid schemaname:name relname:name indexrelname:name idx_scan:int8
    idx_tup_read:int8 idx_tup_fetch:int8
pg_statio_user_tables relid:oid schemaname:name relname:name heap_blks_read:int8 heap_blks_hit:int8
    idx_blks_read:int8 idx_blks_hit:int8 toast_blks_read:int8 toast_blks_hit:int8 tidx_blks_read:int8
    tidx_blks_hit:int8
pg_stat_user_indexes relid:oid indexrelid:oid schemaname:name relname:name indexrelname:name idx_scan:int8
    idx_tup_read:int8 idx_tup_fetch:int8
pg_stat_user_functions funcid:oid schemaname:name funcname:name calls:int8 total_time:float8 self_time:float8
"""
for _spec in re.split(r"\n(?=\S)", _EMPTY_TABLES.strip()):
    _name, *_columns = _spec.split()
    TABLES[_name] = [(col, getattr(c, typ.upper())) for col, typ in (part.split(":") for part in _columns)]

_STORAGE = {c.INT2VECTOR: "SMALLINT[]", c.OIDVECTOR: "BIGINT[]", c.BOOL: "BOOLEAN", c.INT2: "SMALLINT", c.INT4: "INTEGER", c.INT8: "BIGINT", c.OID: "BIGINT",
            c.FLOAT4: "FLOAT", c.FLOAT8: "DOUBLE", c.TEXT_ARRAY: "VARCHAR[]", c.INT2_ARRAY: "SMALLINT[]",
            c.OID_ARRAY: "BIGINT[]", c.CHAR_ARRAY: "VARCHAR[]", c.FLOAT8_ARRAY: "DOUBLE[]", c.ACLITEM_ARRAY: "VARCHAR[]",
            c.TIMESTAMPTZ: "TIMESTAMPTZ"}

# Built-in types clients look up (oid, name, length, category, array oid).
BASE_TYPES = [
    (c.BOOL, "bool", 1, "B", 1000), (c.BYTEA, "bytea", -1, "U", 1001), (c.CHAR, "char", 1, "Z", 1002),
    (c.NAME, "name", 64, "S", 1003), (c.INT8, "int8", 8, "N", 1016), (c.INT2, "int2", 2, "N", 1005),
    (c.INT4, "int4", 4, "N", 1007), (c.TEXT, "text", -1, "S", 1009), (c.OID, "oid", 4, "N", 1028),
    (c.FLOAT4, "float4", 4, "N", 1021), (c.FLOAT8, "float8", 8, "N", 1022), (c.BPCHAR, "bpchar", -1, "S", 1014),
    (c.VARCHAR, "varchar", -1, "S", 1015), (c.DATE, "date", 4, "D", 1182), (c.TIME, "time", 8, "D", 1183),
    (c.TIMESTAMP, "timestamp", 8, "D", 1115), (c.TIMESTAMPTZ, "timestamptz", 8, "D", 1185),
    (c.INTERVAL, "interval", 16, "T", 1187), (c.NUMERIC, "numeric", -1, "N", 1231), (c.UUID, "uuid", 16, "U", 2951),
    (c.JSON, "json", -1, "U", 199), (c.JSONB, "jsonb", -1, "U", 3807), (c.REGCLASS, "regclass", 4, "N", 2210),
    (c.REGPROC, "regproc", 4, "N", 1008), (c.REGTYPE, "regtype", 4, "N", 2211),
    (c.REGNAMESPACE, "regnamespace", 4, "N", 4090), (c.INT2VECTOR, "int2vector", -1, "A", 1006),
    (c.OIDVECTOR, "oidvector", -1, "A", 1013),
]
# Pseudo-types drivers load by name (Npgsql: record, void): (oid, name, length, category, array oid).
PSEUDO_TYPES = [(2249, "record", -1, "P", 2287), (2278, "void", 4, "P", 0), (c.UNKNOWN, "unknown", -2, "X", 0)]
# Types whose I/O functions PostgreSQL names with an underscore (date_recv, not daterecv).
_UNDERSCORED_IO = {"json", "jsonb", "date", "time", "timestamp", "timestamptz", "interval", "numeric", "uuid", "record",
                   "void"}
_ARRAYS = [(1000, "_bool", c.BOOL), (1001, "_bytea", c.BYTEA), (1002, "_char", c.CHAR), (1003, "_name", c.NAME),
           (1016, "_int8", c.INT8), (1005, "_int2", c.INT2), (1007, "_int4", c.INT4), (1009, "_text", c.TEXT),
           (1028, "_oid", c.OID), (1021, "_float4", c.FLOAT4), (1022, "_float8", c.FLOAT8), (1015, "_varchar", c.VARCHAR),
           (1182, "_date", c.DATE), (1115, "_timestamp", c.TIMESTAMP), (1185, "_timestamptz", c.TIMESTAMPTZ),
           (1231, "_numeric", c.NUMERIC), (1014, "_bpchar", c.BPCHAR), (1183, "_time", c.TIME),
           (1187, "_interval", c.INTERVAL), (2951, "_uuid", c.UUID), (199, "_json", c.JSON), (3807, "_jsonb", c.JSONB),
           (2210, "_regclass", c.REGCLASS), (1008, "_regproc", c.REGPROC), (2211, "_regtype", c.REGTYPE),
           (4090, "_regnamespace", c.REGNAMESPACE), (1006, "_int2vector", c.INT2VECTOR),
           (1013, "_oidvector", c.OIDVECTOR), (2287, "_record", 2249)]

# Return types of the PostgreSQL functions emulated here.
FUNCTION_TYPES = {
    "format_type": c.TEXT, "pg_get_userbyid": c.NAME, "pg_table_is_visible": c.BOOL, "pg_type_is_visible": c.BOOL,
    "pg_get_expr": c.TEXT, "pg_get_constraintdef": c.TEXT, "pg_get_indexdef": c.TEXT, "pg_encoding_to_char": c.NAME,
    "obj_description": c.TEXT, "col_description": c.TEXT, "shobj_description": c.TEXT,
    "has_table_privilege": c.BOOL, "has_schema_privilege": c.BOOL, "has_database_privilege": c.BOOL,
    "has_column_privilege": c.BOOL, "pg_get_statisticsobjdef_columns": c.TEXT, "version": c.TEXT,
    "current_database": c.NAME, "current_schema": c.NAME, "current_schemas": c.NAME_ARRAY,
    "pg_backend_pid": c.INT4, "current_setting": c.TEXT, "set_config": c.TEXT, "pg_is_in_recovery": c.BOOL,
    "array_to_string": c.TEXT, "pg_get_viewdef": c.TEXT, "pg_get_function_result": c.TEXT,
    "pg_get_function_arguments": c.TEXT, "pg_relation_size": c.INT8, "pg_total_relation_size": c.INT8,
    "pg_get_partkeydef": c.TEXT, "txid_current": c.INT8, "inet_server_port": c.INT4, "pg_postmaster_start_time": c.TIMESTAMPTZ,
    "row_number": c.INT8, "count": c.INT8, "current_user": c.NAME, "session_user": c.NAME, "user": c.NAME,
    "json_build_object": c.JSON, "jsonb_build_object": c.JSONB, "json_object": c.JSON,
    "quote_ident": c.TEXT, "array_upper": c.INT4, "array_lower": c.INT4, "to_regtype": c.REGTYPE, "to_regclass": c.REGCLASS, "pg_relation_is_publishable": c.BOOL, "pg_get_serial_sequence": c.TEXT, "pg_get_functiondef": c.TEXT, "pg_get_function_sqlbody": c.TEXT, "array_agg": c.TEXT_ARRAY, "lower": c.TEXT, "upper": c.TEXT,
}

_MACROS = """
CREATE MACRO pgc_format_type(t, m) AS (SELECT display FROM pgc.type_display WHERE oid = t);
CREATE MACRO pgc_pg_get_userbyid(o) AS 'dpsql';
CREATE MACRO pgc_pg_table_is_visible(o) AS true;
CREATE MACRO pgc_pg_type_is_visible(o) AS true;
CREATE MACRO pgc_pg_get_expr(e, r) AS NULL::VARCHAR, (e, r, p) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_constraintdef(o) AS NULL::VARCHAR, (o, p) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_indexdef(o) AS NULL::VARCHAR, (o, n, p) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_viewdef(o) AS NULL::VARCHAR, (o, p) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_partkeydef(o) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_statisticsobjdef_columns(o) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_encoding_to_char(e) AS 'UTF8';
CREATE MACRO pgc_obj_description(o) AS (SELECT description FROM pgc.pg_description WHERE objoid = o AND objsubid = 0 LIMIT 1),
    (o, k) AS (SELECT description FROM pgc.pg_description WHERE objoid = o AND objsubid = 0 LIMIT 1);
CREATE MACRO pgc_col_description(o, n) AS (SELECT description FROM pgc.pg_description WHERE objoid = o AND objsubid = n LIMIT 1);
CREATE MACRO pgc_shobj_description(o, k) AS NULL::VARCHAR;
CREATE MACRO pgc_has_table_privilege(a) AS true, (a, b) AS true, (a, b, d) AS true;
CREATE MACRO pgc_has_schema_privilege(a) AS true, (a, b) AS true, (a, b, d) AS true;
CREATE MACRO pgc_has_database_privilege(a) AS true, (a, b) AS true, (a, b, d) AS true;
CREATE MACRO pgc_has_column_privilege(a, b) AS true, (a, b, d) AS true, (a, b, d, e) AS true;
CREATE MACRO pgc_current_schemas(b) AS CASE WHEN b THEN ['pg_catalog', 'public'] ELSE ['public'] END;
CREATE MACRO pgc_pg_is_in_recovery() AS false;
CREATE MACRO pgc_pg_my_temp_schema() AS 16000;
CREATE MACRO pgc_pg_relation_size(o) AS NULL::BIGINT, (o, f) AS NULL::BIGINT;
CREATE MACRO pgc_pg_total_relation_size(o) AS NULL::BIGINT;
CREATE MACRO pgc_pg_table_size(o) AS NULL::BIGINT;
CREATE MACRO pgc_pg_indexes_size(o) AS NULL::BIGINT;
CREATE MACRO pgc_pg_database_size(o) AS NULL::BIGINT;
CREATE MACRO pgc_pg_size_pretty(n) AS CASE WHEN n IS NULL THEN NULL::VARCHAR ELSE n::VARCHAR || ' bytes' END;
CREATE MACRO pgc_pg_get_function_result(o) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_function_arguments(o) AS NULL::VARCHAR;
CREATE MACRO pgc_txid_current() AS 1::BIGINT;
CREATE MACRO pgc_quote_ident(s) AS CASE WHEN regexp_matches(s, '^[a-z_][a-z0-9_]*$') THEN s ELSE '"' || replace(s, '"', '""') || '"' END;
CREATE MACRO pgc_pg_get_serial_sequence(t, col) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_relation_is_publishable(o) AS false;
CREATE MACRO pgc_array_upper(a, d) AS CASE WHEN len(a) = 0 THEN NULL ELSE len(a) END;
CREATE MACRO pgc_array_lower(a, d) AS CASE WHEN len(a) = 0 THEN NULL ELSE 1 END;
CREATE MACRO pgc_regclass_name(x) AS (SELECT relname FROM pgc.pg_class WHERE oid = x);
CREATE MACRO pgc_regclass_oid(t) AS (SELECT oid FROM pgc.pg_class WHERE relname = t);
CREATE MACRO pgc_regtype_name(x) AS (SELECT typname FROM pgc.pg_type WHERE oid = x);
CREATE MACRO pgc_regtype_oid(t) AS (SELECT oid FROM pgc.pg_type WHERE typname = t);
CREATE MACRO pgc_regnamespace_name(x) AS (SELECT nspname FROM pgc.pg_namespace WHERE oid = x);
CREATE MACRO pgc_regnamespace_oid(t) AS (SELECT oid FROM pgc.pg_namespace WHERE nspname = t);
CREATE MACRO pgc_regrole_name(x) AS (SELECT rolname FROM pgc.pg_roles WHERE oid = x);
CREATE MACRO pgc_regrole_oid(t) AS (SELECT oid FROM pgc.pg_roles WHERE rolname = t);
CREATE MACRO pgc_to_regtype(t) AS (SELECT oid FROM pgc.pg_type WHERE typname = t);
CREATE MACRO pgc_to_regclass(t) AS (SELECT oid FROM pgc.pg_class WHERE relname = t);
CREATE MACRO pgc_aclexplode(a) AS unnest(CAST([] AS STRUCT(grantor BIGINT, grantee BIGINT, privilege_type VARCHAR, is_grantable BOOLEAN)[]));
CREATE MACRO pgc_pg_get_function_identity_arguments(o) AS NULL::VARCHAR;
CREATE MACRO pgc_pg_get_functiondef(o) AS error('{no_source}');
CREATE MACRO pgc_pg_get_function_sqlbody(o) AS NULL::VARCHAR;
CREATE MACRO pgc_setting_of(n) AS (SELECT setting FROM pgc.pg_settings WHERE name = n);
CREATE MACRO pgc_pg_is_wal_replay_paused() AS false;
CREATE MACRO pgc_pg_blocking_pids(p) AS CAST([] AS INTEGER[]);
CREATE MACRO pgc_acldefault(k, r) AS CAST(NULL AS VARCHAR[]);
CREATE MACRO pgc_to_char(v, f) AS CAST(v AS VARCHAR);
"""

# What psql's \sf and \ef ask for a function's source: refused when evaluated (\df+ names
# pg_get_function_sqlbody too, for SQL-bodied functions only, of which there are none).
_NO_SOURCE = ("functions have no source here: dpsql is a proxy, and the functions a query may use are the "
              "database's built-ins (\\df name shows one)")
_REWRITTEN_FUNCTIONS = {m.group(1) for m in re.finditer(r"CREATE MACRO pgc_(\w+)", _MACROS)}
# Rewritten inside a catalog query, but not what makes a query one (analysts' SQL uses them too).
_GENERAL_FUNCTIONS = {"to_char"}
_SESSION_FUNCTIONS = {"version", "current_database", "current_schema", "current_user", "session_user", "user",
                      "pg_backend_pid", "current_setting", "set_config", "inet_server_port", "inet_server_addr",
                      "pg_postmaster_start_time", "current_role"}
_CATALOG_MARKERS = re.compile(r"\b(pg_catalog|information_schema|pg_[a-z_]+|current_schema|current_database|"
                              r"current_user|session_user|current_setting|set_config|version|current_role|current_schemas|"
                              r"regclass|regtype|regnamespace|regrole|regproc|regprocedure|"
                              r"format_type|obj_description|col_description|has_\w+_privilege)\b", re.I)


def is_catalog_query(sql: str) -> bool:
    """A statement the catalog answers: it reads pg_catalog/information_schema tables or calls
    catalog/session functions (decided on the parsed statement; a regex only pre-filters)."""
    head = first_word(sql)
    if not (head in ("SELECT", "WITH") or head.startswith("(")) or not _CATALOG_MARKERS.search(sql):
        return False
    try:
        tree = sqlglot.parse_one(_pre(sql), read="postgres")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return False
    if tree is None:
        return False
    for t in tree.find_all(exp.Table):
        db = t.db.lower()
        if db in ("pg_catalog", "information_schema") or (not db and t.name.lower() in TABLES):
            return True
        if isinstance(t.this, exp.Anonymous) and t.this.name.lower() in TABLES:
            return True
    for f in tree.find_all(exp.Func):
        name = _func_name(f)
        if (name in _SESSION_FUNCTIONS or (name in _REWRITTEN_FUNCTIONS and name not in _GENERAL_FUNCTIONS)
                or name in FUNCTION_TYPES and name.startswith(("pg_", "has_"))):
            return True
    if any(isinstance(n, exp.Cast) and (_cast_target(n) in _REG_CASTS or _cast_target(n) in ("regproc", "regprocedure"))
           for n in tree.walk()):
        return True
    return any(isinstance(n, (exp.CurrentUser, exp.CurrentSchema)) for n in tree.walk())


def _pre(sql: str) -> str:
    """Textual PostgreSQL-isms sqlglot does not parse: OPERATOR(pg_catalog.x), COLLATE."""
    sql = re.sub(r"OPERATOR\s*\(\s*pg_catalog\s*\.\s*([~!=<>*+\-]+)\s*\)", r"\1", sql, flags=re.I)
    sql = re.sub(r"\s+COLLATE\s+(pg_catalog\.)?\"?(default|C|POSIX)\"?", "", sql, flags=re.I)
    # arrays of reg* types (pgcli): the catalog's function tables are empty, text arrays will do
    sql = re.sub(r"::\s*(?:pg_catalog\.)?(?:regtype|regclass|regproc)\s*\[\]", "::text[]", sql, flags=re.I)
    sql = re.sub(r"::\s*(?:pg_catalog\.)?oid\s*\[\]", "::bigint[]", sql, flags=re.I)  # OIDs are numbers
    return sql


class Catalog:
    def __init__(self, policy: Policy, schema: Mapping[str, Mapping[str, str]], database: str = "dpsql"):
        self.policy = policy
        self.schema = schema
        self.database = database
        self._con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                                       "autoload_known_extensions": False})
        self._lock = threading.Lock()
        self._build()
        self._con.execute("SET enable_external_access = false")
        self._con.execute("SET lock_configuration = true")

    # Contents ------------------------------------------------------------------------------
    def _build(self) -> None:
        con = self._con
        con.execute("CREATE SCHEMA pgc")
        for table, cols in TABLES.items():
            defs = ", ".join(f'"{name}" {_STORAGE.get(oid, "VARCHAR")}' for name, oid in cols)
            con.execute(f"CREATE TABLE pgc.{table} ({defs})")
        con.execute("CREATE TABLE pgc.type_display (oid BIGINT, display VARCHAR)")
        insert_rows(con, "pgc.type_display", list(c.TYPE_NAMES.items()), 2)
        self._insert("pg_namespace", [(PG_CATALOG, "pg_catalog", OWNER, None), (PUBLIC, "public", OWNER, None),
                                      (INFORMATION_SCHEMA, "information_schema", OWNER, None),
                                      (PG_TEMP, PG_TEMP_NAME, OWNER, None)])
        self._insert("pg_database", [(DATABASE_OID, self.database, OWNER, 6, "c", False, True, -1, "C.UTF-8", "C.UTF-8",
                                      None, None, None, 1663)])
        self._insert("pg_roles", [(OWNER, "dpsql", False, True, False, False, True, False, -1, False, None, "********", None)]
                     + [(20000 + i, u, False, True, False, False, True, False, -1, False, None, "********", None)
                        for i, u in enumerate(sorted(self.policy.users))])
        self._insert("pg_user", [(u, 20000 + i, False, False, False, False, None) for i, u in enumerate(sorted(self.policy.users))])
        self._insert("pg_am", [(2, "heap", "heap_tableam_handler", "t"), (403, "btree", "bthandler", "i")])
        self._insert("pg_tablespace", [(1663, "pg_default", OWNER), (1664, "pg_global", OWNER)])
        types = []
        for oid, name, length, category, array in BASE_TYPES:
            io = f"{name}_" if name in _UNDERSCORED_IO else name  # ADBC maps types by typreceive's name
            types.append((oid, name, PG_CATALOG, OWNER, length, length in (1, 2, 4, 8), "b", category, False, True, ",",
                          0, 0, array, f"{io}in", f"{io}out", f"{io}recv", f"{io}send", 0, -1, 0, 0, False,
                          "i", "p", None))
        for oid, name, length, category, array in PSEUDO_TYPES:
            io = f"{name}_" if name in _UNDERSCORED_IO else name
            types.append((oid, name, PG_CATALOG, OWNER, length, False, "p", category, False, True, ",", 0, 0, array,
                          f"{io}in", f"{io}out", f"{io}recv", f"{io}send", 0, -1, 0, 0, False, "d", "x", None))
        for oid, name, elem in _ARRAYS:
            types.append((oid, name, PG_CATALOG, OWNER, -1, False, "b", "A", False, True, ",", 0, elem, 0, "array_in",
                          "array_out", "array_recv", "array_send", 0, -1, 0, 0, False, "i", "x", None))
        rows: dict[str, list[tuple]] = {"pg_type": types}
        for i, (name, table) in enumerate(sorted(self.policy.tables.items())):
            comments = {col: _column_comment(table, col) for col in self.schema.get(name, {})}
            for kind, part in self._relation(FIRST_TABLE_OID + i, 30000 + i, name, self.schema.get(name, {}),
                                             _table_comment(table), comments).items():
                rows.setdefault(kind, []).extend(part)
        for kind, part in rows.items():
            self._insert(kind, part)
        procs = [(FIRST_FUNCTION_OID + i, name, PG_CATALOG, ret, "a" if agg else "f", None, None, None, None, False,
                  None, name, 12, agg, False) for i, (name, ret, agg) in enumerate(_FUNCTIONS)]
        self._insert("pg_proc", procs)
        # The types' I/O functions, which drivers join pg_type to (Npgsql: pg_proc.oid = typreceive): only such
        # a join reads them (pg_proc_with_io), so that listings and completions show the functions queries may use.
        io = sorted({f for t in types for f in t[14:18]})
        con.execute("CREATE TABLE pgc.io_functions AS SELECT * FROM pgc.pg_proc LIMIT 0")
        insert_rows(con, "pgc.io_functions", _full_rows("pg_proc", [
            (FIRST_IO_FUNCTION_OID + i, name, PG_CATALOG, 0, "f", None, None, None, None, False, None, name, 12, False,
             False) for i, name in enumerate(io)]), len(TABLES["pg_proc"]))
        con.execute("CREATE VIEW pgc.pg_proc_with_io AS SELECT * FROM pgc.pg_proc UNION ALL SELECT * FROM pgc.io_functions")
        self._insert("is_routines", [(self.database, "pg_catalog", f"{p[1]}_{p[0]}", self.database, "pg_catalog", p[1],
                                      "FUNCTION", c.TYPE_NAMES.get(p[3], "text"),
                                      next((t[1] for t in BASE_TYPES if t[0] == p[3]), "text"), "EXTERNAL", None, "C",
                                      "YES", "INVOKER") for p in procs])
        categories = {"reserved": ("R", "reserved"), "unreserved": ("U", "unreserved"),
                      "column_name": ("C", "unreserved (cannot be function or type name)"),
                      "type_function": ("T", "reserved (can be function or type name)")}
        keywords = self._con.execute("SELECT keyword_name, keyword_category FROM duckdb_keywords() ORDER BY 1").fetchall()
        self._insert("pg_get_keywords", [(word, *categories.get(kind, ("U", "unreserved"))[:1], True,
                                          categories.get(kind, ("U", "unreserved"))[1], "can be bare label")
                                         for word, kind in keywords])
        self._insert("is_schemata", [(self.database, "public", "dpsql"), (self.database, "pg_catalog", "dpsql"),
                                     (self.database, "information_schema", "dpsql")])
        settings = [{"name": k, "setting": v, "category": "dpsql", "short_desc": "", "context": "user",
                     "vartype": "string", "source": "default", "boot_val": v, "reset_val": v, "pending_restart": False}
                    for k, v in sorted(_SETTINGS.items())]
        self._insert("pg_settings", settings)
        self._insert("pg_show_all_settings", settings)  # pg_settings is PostgreSQL's view of this function
        for stmt in _MACROS.replace("{no_source}", _NO_SOURCE.replace("'", "''")).strip().split(";\n"):
            if stmt.strip():
                con.execute(stmt)

    def _relation(self, oid: int, rowtype: int, name: str, cols: Mapping[str, str], comment: str | None,
                  column_comments: Mapping[str, str | None], view: bool = False) -> dict[str, list[tuple]]:
        """A relation's rows in every catalog table that lists relations: a declared table in
        public, or a session's temporary view in its pg_temp schema."""
        space, space_name = (PG_TEMP, PG_TEMP_NAME) if view else (PUBLIC, "public")
        out: dict[str, list[tuple]] = {
            "pg_type": [(rowtype, name, space, OWNER, -1, False, "c", "C", False, True, ",", oid, 0, 0, "record_in",
                         "record_out", "record_recv", "record_send", 0, -1, 0, 0, False, "d", "x", None)],
            "pg_class": [(oid, name, space, rowtype, 0, OWNER, 0 if view else 2, 0 if view else oid, 0, 0, -1.0, 0, 0,
                          False, False, "t" if view else "p", "v" if view else "r", len(cols), 0, False, False, False,
                          False, False, True, "n" if view else "d", False, 0, None, None, None)],
            "pg_attribute": [], "pg_description": [], "is_columns": [],
            "is_tables": [{"table_catalog": self.database, "table_schema": space_name, "table_name": name,
                           "table_type": "VIEW" if view else "BASE TABLE", "is_insertable_into": "NO",
                           "is_typed": "NO"}],
        }
        if comment:
            out["pg_description"].append((oid, 1259, 0, comment))
        if not view:
            for stats in ("pg_stat_user_tables", "pg_stat_all_tables", "pg_statio_user_tables", "pg_statio_all_tables"):
                out[stats] = [{"relid": oid, "schemaname": "public", "relname": name}]  # every counter unknown: NULL
            out["pg_tables"] = [("public", name, "dpsql", None, False, False, False, False)]
        for num, (col, dtype) in enumerate(cols.items(), start=1):
            typ = c.oid_of(dtype)
            out["pg_attribute"].append((oid, col, typ, -1, c.TYPE_LENGTH.get(typ, -1), num, 0, -1, -1,
                                        c.TYPE_LENGTH.get(typ, -1) in (1, 2, 4, 8), "i", "p", "", False, False, False,
                                        "", "", False, True, 0, 0, None, None, None))
            if column_comments.get(col):
                out["pg_description"].append((oid, 1259, num, column_comments[col]))
            out["is_columns"].append({
                "table_catalog": self.database, "table_schema": space_name, "table_name": name, "column_name": col,
                "ordinal_position": num, "is_nullable": "YES", "data_type": c.TYPE_NAMES.get(typ, "text"),
                "udt_catalog": self.database, "udt_schema": "pg_catalog",
                "udt_name": next((t[1] for t in BASE_TYPES if t[0] == typ), "text"),
                "datetime_precision": _DATETIME_PRECISION.get(typ), "dtd_identifier": str(num),
                "is_self_referencing": "NO", "is_identity": "NO", "identity_cycle": "NO", "is_generated": "NEVER",
                "is_updatable": "NO"})
        return out

    def _insert(self, table: str, rows: list[tuple | dict]) -> None:
        insert_rows(self._con, f"pgc.{table}", _full_rows(table, rows), len(TABLES[table]))

    # Queries -------------------------------------------------------------------------------
    def answer(self, sql: str, params: list[Any], session, user: str, pid: int = 0
               ) -> tuple[list[str], list[int], list[tuple]]:
        """Run a catalog query: (column names, PostgreSQL type OIDs, rows). `pid` is the one
        the connection's BackendKeyData gave (pg_backend_pid(): tools match the two to find,
        cancel or hide their own session)."""
        try:
            tree = sqlglot.parse_one(_pre(sql), read="postgres")
        except sqlglot.errors.ParseError as e:
            raise ProgrammingError(f"syntax error in catalog query: {e.errors[0]['description'] if e.errors else e}",
                                   sqlstate="42601") from None
        names = _output_names(tree)
        types = _output_types(tree)
        io = _joins_regproc(tree)
        tree = _regproc_comparisons(_reg_comparisons(_bind(tree, params)))
        views = self._view_rows(session)
        tree = self._rewrite(tree, session, user, set(views), pid, io)
        text = tree.sql(dialect="duckdb")
        with self._lock:
            cur = self._con.cursor()
        try:
            for kind, part in views.items():  # this cursor's own copies, with the session's views added
                cur.execute(f"CREATE TEMP TABLE session_{kind} AS SELECT * FROM pgc.{kind}")
                insert_rows(cur, f"session_{kind}", _full_rows(kind, part), len(TABLES[kind]))
            cur.execute(text)
            rows = cur.fetchall()
            result_names = [d[0] for d in cur.description]
            duck = [str(d[1]) for d in cur.description]
        except duckdb.Error as e:
            if _NO_SOURCE in str(e):
                raise Error(_NO_SOURCE, sqlstate="0A000",
                            hint="the README's 'What SQL is answered' lists the functions queries may use") from None
            # The emulation holds no data, but an engine's text is never a client's business.
            log.info("catalog query not supported (%s): %s", type(e).__name__, str(e).splitlines()[0])
            missing = _missing_name(str(e).splitlines()[0], sql)
            raise Error("catalog query not supported: it uses a catalog table, column or function dpsql does not "
                        "emulate" + (f" ({missing})" if missing else ""), sqlstate="0A000",
                        hint="dpsql answers catalog queries from an emulation of PostgreSQL's catalog "
                             "(tables, columns, types, comments); please report the client and the query") from None
        finally:
            cur.close()
        n = len(duck)
        names = [a if a is not None else b for a, b in zip((names + [None] * n)[:n], result_names)]
        oids = [t if t is not None else c.oid_of(d) for t, d in zip((types + [None] * n)[:n], duck)]
        return names, oids, [tuple(r) for r in rows]

    def _view_rows(self, session) -> dict[str, list[tuple]]:
        """The catalog rows of the session's temporary views (ibis looks up the columns of the
        view it just created), by catalog table; empty without views."""
        views = session.view_columns() if session is not None else []
        rows: dict[str, list[tuple]] = {}
        for i, (name, cols) in enumerate(views):
            for kind, part in self._relation(FIRST_VIEW_OID + 2 * i, FIRST_VIEW_OID + 2 * i + 1, name, cols,
                                             "dpsql: a temporary view of this session (run and charged when read)",
                                             {}, view=True).items():
                rows.setdefault(kind, []).extend(part)
        return rows

    def _rewrite(self, tree: exp.Expression, session, user: str, local: set[str] = frozenset(), pid: int = 0,
                 io: bool = False) -> exp.Expression:
        """`local`: catalog tables this query reads from the cursor's own copies (with views)."""
        cte_names = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        # the system column tableoid (pgAdmin: `sl.classoid = rel.tableoid`) is the catalog table's own OID
        table_oids = {t.alias_or_name.lower(): _CATALOG_OIDS[t.name.lower()] for t in tree.find_all(exp.Table)
                      if isinstance(t.this, exp.Identifier) and t.name.lower() in _CATALOG_OIDS}

        def point(node: exp.Table, name: str) -> exp.Table:
            new = _table(node, "pg_proc_with_io" if io and name == "pg_proc" else name)
            if name in local:
                new.set("this", exp.to_identifier(f"session_{name}"))
                new.set("db", None)
            return new

        def visit(node: exp.Expression) -> exp.Expression:
            if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous) and node.this.name.lower() in TABLES:
                name = node.this.name.lower()  # pg_get_keywords(): the table of its rows
                if node.args.get("alias") is None:
                    node = node.copy()
                    node.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
                return point(node, name)
            if (isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous)
                    and node.this.name.lower() == "generate_subscripts"):
                return _subscripts(node)
            if isinstance(node, exp.Table) and not isinstance(node.this, exp.Identifier) and node.db.lower() == "pg_catalog":
                node = node.copy()
                node.set("db", None)
                return node
            if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
                name, db = node.name.lower(), node.db.lower()
                if db == "information_schema" and f"is_{name}" in TABLES:
                    return point(node, f"is_{name}")
                if db in ("pg_catalog", "") and name in TABLES and name not in cte_names:
                    return point(node, name)
                if db == "pg_catalog" or db == "information_schema":
                    raise Error(f'relation "{db}.{name}" is not available in dpsql\'s catalog', sqlstate="42P01")
                return node
            if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier) and \
                    node.this.name.lower() == "pg_catalog":
                return node.expression
            if isinstance(node, exp.Column) and node.name.lower() == "tableoid" and node.table.lower() in table_oids:
                return exp.Literal.number(table_oids[node.table.lower()])
            if isinstance(node, exp.Column) and node.args.get("db") is not None:
                node = node.copy()
                node.set("db", None)
                return node
            if isinstance(node, exp.Literal) and node.is_string and re.fullmatch(r"\{[^{}]*\}", node.name):
                items = [x.strip().strip('"') for x in node.name[1:-1].split(",") if x.strip()]
                return exp.Array(expressions=[exp.Literal.number(x) if x.lstrip("-").isdigit() else exp.Literal.string(x)
                                              for x in items])
            if isinstance(node, (exp.CurrentUser,)) or (isinstance(node, exp.Column) and not node.table and
                                                         node.name.lower() in ("current_user", "session_user", "user", "current_role")):
                return exp.Literal.string(user)
            if isinstance(node, exp.CurrentSchema):
                return exp.Literal.string("public")
            if (isinstance(node, exp.Cast) and _cast_target(node) in ("regproc", "regprocedure")
                    and isinstance(node.this, exp.Literal) and node.this.is_string
                    and isinstance(node.parent, exp.Cast) and _cast_target(node.parent) == "oid"):
                return exp.Literal.number(self._function_oid(node.this.name))  # psql's \sf, \ef look the OID up
            if isinstance(node, exp.Cast):
                return _cast(node)
            if (isinstance(node, (exp.Like, exp.ILike)) and not isinstance(node.parent, exp.Escape)
                    and "\\" in node.expression.name):  # PostgreSQL's LIKE escapes with \ by default, DuckDB's not
                return exp.Escape(this=node, expression=exp.Literal.string("\\"))
            if isinstance(node, exp.Substring) and isinstance(node.args.get("start"), exp.Literal) \
                    and node.args["start"].is_string:  # substring(x FROM 'regex') (pgAdmin reads reloptions)
                pattern = node.args["start"]
                return exp.Nullif(this=exp.RegexpExtract(this=node.this, expression=pattern,
                                                         group=exp.Literal.number(1 if "(" in pattern.name else 0)),
                                  expression=exp.Literal.string(""))
            if isinstance(node, exp.Unnest) and isinstance(node.parent, (exp.From, exp.Join)):
                return _unnest_rows(node)
            if isinstance(node, exp.Func):
                name = _func_name(node)
                if name in ("json_build_object", "json_object", "jsonb_build_object"):
                    return exp.Cast(this=exp.Null(), to=exp.DataType.build("VARCHAR"))
                if name in _SESSION_FUNCTIONS:
                    return self._session_value(name, node, session, user, pid)
                if name in _REWRITTEN_FUNCTIONS:
                    return exp.Anonymous(this=f"pgc_{name}", expressions=list(node.args.get("expressions") or
                                                                             [a for a in node.args.values() if isinstance(a, exp.Expression)]))
            return node

        return _bottom_up(tree, visit)

    def _function_oid(self, text: str) -> int:
        """The OID of a function named as `'name'::regproc` or `'name(args)'::regprocedure` spell it."""
        name = text.split("(")[0].split(".")[-1].strip().strip('"').lower()
        with self._lock:
            found = self._con.execute("SELECT min(oid) FROM pgc.pg_proc WHERE proname = ?", [name]).fetchone()[0]
        if found is None:
            raise Error(f'function "{text}" does not exist', sqlstate="42883",
                        hint="\\df lists the functions queries may use")
        return int(found)

    def _session_value(self, name: str, node: exp.Func, session, user: str, pid: int) -> exp.Expression:
        if name == "version":
            return exp.Literal.string(f"PostgreSQL 15.0 (dpsql {__version__}) on x86_64-pc-linux-gnu, differentially private proxy")
        if name == "current_database":
            return exp.Literal.string(self.database)
        if name == "current_schema":
            return exp.Literal.string("public")
        if name in ("current_user", "session_user", "user", "current_role"):
            return exp.Literal.string(user)
        if name == "pg_backend_pid":
            return exp.Literal.number(pid)
        if name == "inet_server_port":
            return exp.Literal.number(0)
        if name == "inet_server_addr":
            return exp.Null()
        if name == "pg_postmaster_start_time":
            return exp.Cast(this=exp.Literal.string("2026-01-01 00:00:00+00"), to=exp.DataType.build("TIMESTAMPTZ"))
        args = [a for a in (node.args.get("expressions") or [node.this]) if isinstance(a, exp.Expression)]
        setting = args[0].name.lower() if args and isinstance(args[0], exp.Literal) else ""
        if name == "set_config" and setting.startswith("dpsql."):  # the budget's settings change through SET only
            raise ProgrammingError(f"set_config() cannot change {setting}", sqlstate="55P02",
                                   hint=f"use SET {setting} = ...; SHOW {setting} gives its value")
        if name == "set_config" and len(args) > 1 and isinstance(args[1], exp.Literal):
            return exp.Literal.string(args[1].name)
        if name == "current_setting" and args and not isinstance(args[0], exp.Literal):  # \dconfig: s.name
            return exp.Anonymous(this="pgc_setting_of", expressions=[args[0]])
        value = session.setting(setting) if session is not None else None
        if value is None:  # what pg_settings lists (psql's \dconfig: bytea_output)
            value = next((v for k, v in _SETTINGS.items() if k.lower() == setting), None)
        return exp.Literal.string(value) if value is not None else exp.Null()


def _full_rows(table: str, rows: list[tuple | dict]) -> list[tuple]:
    """Rows of a catalog table, each a tuple in the table's column order or a dict by column
    name (PostgreSQL's wide views and tables: the columns a row does not give are NULL)."""
    columns = [name for name, _ in TABLES[table]]
    return [tuple(r.get(col) for col in columns) if isinstance(r, dict) else tuple(r) + (None,) * (len(columns) - len(r))
            for r in rows]


# What pg_settings lists (the values a client reads there; SHOW answers from the session).
_SETTINGS = {"server_version": "15.0", "server_version_num": "150000", "server_encoding": "UTF8",
             "client_encoding": "UTF8", "standard_conforming_strings": "on", "max_identifier_length": "63",
             "integer_datetimes": "on", "TimeZone": "UTC", "DateStyle": "ISO, MDY", "bytea_output": "hex"}

_DATETIME_PRECISION = {c.DATE: 0, c.TIME: 6, c.TIMESTAMP: 6, c.TIMESTAMPTZ: 6, c.INTERVAL: 6}


def _missing_name(message: str, sql: str) -> str | None:
    """The table, column or function an engine message says is missing, when the client's own
    query spells it (so that nothing but the client's words is echoed)."""
    column = re.search(r'Table "([^"]{1,63})" does not have a column named "([^"]{1,63})"', message)
    if column:  # the column, as the client's query spells it (`c.is_identity`), not the alias alone
        table, name = column.groups()
        if name.lower() not in sql.lower():
            return None
        try:
            tables = sqlglot.parse_one(_pre(sql), read="postgres").find_all(exp.Table)
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
            tables = iter(())
        real = next((t for t in tables if t.alias_or_name.lower() == table.lower()), None)
        return f"{real.db + '.' if real.db else ''}{real.name}.{name}" if real is not None else name
    for found in re.findall(r'"([^"]{1,63})"|with name ([A-Za-z_][A-Za-z0-9_]{0,62})', message):
        name = found[0] or found[1]
        if name and name.lower() in sql.lower():
            return name
    return None


def _bottom_up(node: exp.Expression, fn) -> exp.Expression:
    """Apply fn to every node, children first (sqlglot's transform skips the inside of a
    node it has just replaced, and casts and functions here nest)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expression):
            node.set(key, _bottom_up(value, fn))
        elif isinstance(value, list):
            node.set(key, [_bottom_up(v, fn) if isinstance(v, exp.Expression) else v for v in value])
    return fn(node)


def _bind(tree: exp.Expression, params: list[Any]) -> exp.Expression:
    """Parameters become literals first, so later rewrites (casts) see values."""
    from ..session import to_literal

    position = iter(range(len(params)))

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Parameter) and isinstance(node.this, exp.Literal):
            i = int(node.this.this) - 1
            return to_literal(params[i] if 0 <= i < len(params) else None)
        if isinstance(node, exp.Placeholder):
            i = next(position, -1)
            return to_literal(params[i] if 0 <= i < len(params) else None)
        return node

    return tree.transform(visit)


def _output_names(tree: exp.Expression) -> list[str | None]:
    """Column names as PostgreSQL gives them (None: take the engine's)."""
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None:
        return []
    out: list[str | None] = []
    for item in select.expressions:
        if _is_star(item):
            return out + [None] * 1000
        out.append(_pg_name(item))
    return out


_ARRAY_TYPES = {c.TEXT: c.TEXT_ARRAY, c.NAME: c.NAME_ARRAY, c.INT2: c.INT2_ARRAY, c.INT4: c.INT4_ARRAY,
                c.INT8: c.INT8_ARRAY, c.OID: c.OID_ARRAY, c.CHAR: c.CHAR_ARRAY, c.BOOL: c.BOOL_ARRAY,
                c.FLOAT8: c.FLOAT8_ARRAY, c.VARCHAR: c.TEXT_ARRAY}


def _is_star(node: exp.Expression) -> bool:
    return isinstance(node, exp.Star) or (isinstance(node, exp.Column) and isinstance(node.this, exp.Star))


_ELEMENT_TYPES = {array: element for element, array in reversed(list(_ARRAY_TYPES.items()))}


def _pg_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Alias):
        ident = node.args.get("alias")
        return node.alias if (ident is not None and ident.quoted) else node.alias.lower()
    if isinstance(node, exp.Column):
        return node.name if node.this.quoted else node.name.lower()
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Expression):
        return _pg_name(node.expression)
    if isinstance(node, exp.Cast):
        inner = _pg_name(node.this)
        if inner != "?column?":
            return inner
        to = node.to.sql(dialect="postgres").lower().split(".")[-1].strip('"') if isinstance(node.to, exp.DataType) else "?column?"
        return {"int": "int4", "integer": "int4", "bigint": "int8", "smallint": "int2", "boolean": "bool",
                "double precision": "float8", "real": "float4"}.get(to, to)
    if isinstance(node, exp.Case):
        default = node.args.get("default")
        name = _pg_name(default) if default is not None else "?column?"
        return name if name != "?column?" else "case"
    if isinstance(node, exp.Paren):
        return _pg_name(node.this)
    if isinstance(node, exp.Subquery) and isinstance(node.this, exp.Select) and node.this.expressions:
        return _pg_name(node.this.expressions[0])
    if isinstance(node, exp.Array):
        return "array"
    if isinstance(node, exp.CurrentUser):
        return "current_user"
    if isinstance(node, exp.Func):
        return _func_name(node)
    return "?column?"


def _table(node: exp.Table, name: str) -> exp.Table:
    """The same table reference (alias, nested joins kept) pointed at dpsql's catalog."""
    new = node.copy()
    new.set("this", exp.to_identifier(name))
    new.set("db", exp.to_identifier("pgc"))
    new.set("catalog", None)
    if new.args.get("alias") is None:
        new.set("alias", exp.TableAlias(this=exp.to_identifier(node.name)))
    return new


_SQLGLOT_NAMES = {"current_version": "version"}  # sqlglot's names for PostgreSQL's functions


def _func_name(node: exp.Func) -> str:
    if isinstance(node, exp.Anonymous):
        return str(node.name).lower()
    name = node.sql_name().lower()
    return _SQLGLOT_NAMES.get(name, name)


_REG_CASTS = {"regclass": ("pg_class", "relname", "oid"), "regtype": ("pg_type", "typname", "oid"),
              "regrole": ("pg_roles", "rolname", "oid"),
              "regnamespace": ("pg_namespace", "nspname", "oid")}


# PostgreSQL's own OIDs of the catalog tables clients name in regclass casts (pg_description's
# classoid is 1259 for a table's comment: SQLAlchemy joins on 'pg_catalog.pg_class'::regclass).
_CATALOG_OIDS = {"pg_class": 1259, "pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255, "pg_namespace": 2615,
                 "pg_description": 2609, "pg_constraint": 2606, "pg_index": 2610, "pg_database": 1262,
                 "pg_authid": 1260, "pg_am": 2601, "pg_attrdef": 2604, "pg_inherits": 2611, "pg_trigger": 2620,
                 "pg_aggregate": 2600, "pg_cast": 2605, "pg_collation": 3456, "pg_conversion": 2607,
                 "pg_default_acl": 826, "pg_enum": 3501, "pg_event_trigger": 3466, "pg_extension": 3079,
                 "pg_foreign_data_wrapper": 2328, "pg_foreign_server": 1417, "pg_foreign_table": 3118,
                 "pg_language": 2612, "pg_opclass": 2616, "pg_operator": 2617, "pg_opfamily": 2753,
                 "pg_publication": 6104, "pg_rewrite": 2618, "pg_sequence": 2224, "pg_statistic_ext": 3381,
                 "pg_subscription": 6100, "pg_tablespace": 1213, "pg_transform": 3576, "pg_ts_config": 3602,
                 "pg_ts_dict": 3600, "pg_ts_parser": 3601, "pg_ts_template": 3764, "pg_user_mapping": 1418}


def _cast_target(node: exp.Cast) -> str:
    to = node.to
    return (to.sql(dialect="postgres").lower().replace("pg_catalog.", "").strip('"')
            if isinstance(to, exp.DataType) else str(to).lower())


def _reg_comparisons(tree: exp.Expression) -> exp.Expression:
    """`x::regtype != 'trigger'::regtype` (pgcli) compares OIDs, while a lone `x::regtype` shows
    a name: a comparison of two reg* casts keeps the column's OID, and a name the catalog does
    not know compares as an OID no row has."""
    def reg(node: exp.Expression) -> str | None:
        return _cast_target(node) if isinstance(node, exp.Cast) and _cast_target(node) in _REG_CASTS else None

    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.EQ, exp.NEQ)) and reg(node.this) and reg(node.this) == reg(node.expression):
            sides = []
            for side in (node.this, node.expression):
                inner = side.this
                sides.append(exp.Coalesce(this=_cast(side), expressions=[exp.Literal.number(-1)])
                             if isinstance(inner, exp.Literal) and inner.is_string else inner)
            return type(node)(this=sides[0], expression=sides[1])
        return node

    if any(isinstance(n, (exp.EQ, exp.NEQ)) for n in tree.walk()):
        return tree.transform(visit, copy=True)
    return tree


# Columns of type regproc: stored as the function's name ('-' for none), as PostgreSQL shows them.
_REGPROC_COLUMNS = {col for cols in TABLES.values() for col, oid in cols if oid == c.REGPROC}


def _joins_regproc(tree: exp.Expression) -> bool:
    """Whether the query matches a function's OID with a regproc column (`p.oid = t.typreceive`)."""
    def regproc(node: exp.Expression) -> bool:
        return isinstance(node, exp.Column) and node.name.lower() in _REGPROC_COLUMNS

    def oid(node: exp.Expression) -> bool:
        return isinstance(node, exp.Column) and node.name.lower() == "oid"

    return any(isinstance(n, (exp.EQ, exp.NEQ)) and ((regproc(n.this) and oid(n.expression)) or
                                                     (oid(n.this) and regproc(n.expression))) for n in tree.walk())


def _regproc_comparisons(tree: exp.Expression) -> exp.Expression:
    """`typreceive != 0` (ADBC's type loader) compares a regproc with an OID: 0 is the '-' the
    column holds for no function, any other number names a function the catalog does not list.
    `pg_proc.oid = a.typreceive` (Npgsql's type loader) joins on the function's name."""
    def visit(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.EQ, exp.NEQ)):
            sides = [node.this, node.expression]
            for i, side in enumerate(sides):
                other = sides[1 - i]
                if not (isinstance(side, exp.Column) and side.name.lower() in _REGPROC_COLUMNS):
                    continue
                if isinstance(other, exp.Literal) and other.is_int:
                    sides[1 - i] = exp.Literal.string("-" if int(other.name) == 0 else other.name)
                    return type(node)(this=sides[0], expression=sides[1])
                if isinstance(other, exp.Column) and other.name.lower() == "oid":
                    sides[1 - i] = exp.column("proname", table=other.table or None)
                    return type(node)(this=sides[0], expression=sides[1])
        return node

    return tree.transform(visit, copy=True)


def _subscripts(node: exp.Table) -> exp.Expression:
    """`generate_subscripts(a, 1) AS k` in FROM (peewee): the subscripts of a one-dimensional
    array, a column named as the alias, the way PostgreSQL names a function's only column."""
    alias = node.alias or "generate_subscripts"
    array = node.this.expressions[0].copy()
    numbers = exp.Anonymous(this="range", expressions=[exp.Literal.number(1),
                                                        exp.Add(this=exp.Length(this=array), expression=exp.Literal.number(1))])
    select = exp.select(exp.alias_(exp.Unnest(expressions=[numbers]), alias))
    return select.subquery(alias)


def _unnest_rows(node: exp.Unnest) -> exp.Expression:
    """`unnest(a, b) WITH ORDINALITY AS k(x, y, n)` in FROM (Django's index query): PostgreSQL
    walks the arrays side by side; DuckDB's unnest takes one, so a lateral subquery indexes them."""
    arrays = node.expressions
    offset = node.args.get("offset")
    if len(arrays) < 2 and not offset:
        return node
    alias = node.args.get("alias")
    names = [col.name for col in (alias.columns if alias is not None else [])]
    names += ["unnest"] * (len(arrays) - len(names))
    if isinstance(offset, exp.Identifier):
        names.append(offset.name)
    elif offset:
        names.append("ordinality")
    position = exp.column("dpsql_n", table="dpsql_r")
    items = [exp.alias_(exp.Bracket(this=a.copy(), expressions=[position.copy()]), n) for a, n in zip(arrays, names)]
    if offset:
        items.append(exp.alias_(position.copy(), names[-1]))
    longest = exp.Greatest(this=exp.Length(this=arrays[0].copy()),
                           expressions=[exp.Length(this=a.copy()) for a in arrays[1:]]) if len(arrays) > 1 \
        else exp.Length(this=arrays[0].copy())
    rows = exp.Table(this=exp.Anonymous(this="range", expressions=[exp.Literal.number(1), exp.Add(this=longest, expression=exp.Literal.number(1))]),
                     alias=exp.TableAlias(this=exp.to_identifier("dpsql_r"), columns=[exp.to_identifier("dpsql_n")]))
    select = exp.select(*items).from_(rows)
    return exp.Lateral(this=select.subquery(), alias=exp.TableAlias(this=exp.to_identifier(alias.name if alias is not None else "unnest")))


def _cast(node: exp.Cast) -> exp.Expression:
    """::regclass / ::regtype / ::regproc / ::oid / ::name / ::"char" onto plain values."""
    target = _cast_target(node)
    inner = node.this
    if target in _REG_CASTS:
        table, name_col, oid_col = _REG_CASTS[target]
        if isinstance(inner, exp.Literal) and inner.is_string:
            text = inner.name.split(".")[-1].strip('"')
            if text.isdigit():
                return exp.Literal.number(int(text))
            if target == "regclass" and text.lower() in _CATALOG_OIDS:
                return exp.Literal.number(_CATALOG_OIDS[text.lower()])
            return exp.Anonymous(this=f"pgc_{target}_oid", expressions=[exp.Literal.string(text)])
        return exp.Anonymous(this=f"pgc_{target}_name", expressions=[inner])
    if target == "regproc":
        if isinstance(inner, exp.Literal) and inner.is_string:
            return exp.Literal.string(inner.name.split(".")[-1])
        return inner
    if target in ("oid", "name", '"char"', "char", "text", "pg_catalog.text", "information_schema.sql_identifier",
                  "xid"):
        if target in ("oid", "xid"):
            return exp.Cast(this=inner, to=exp.DataType.build("BIGINT"))
        return exp.Cast(this=inner, to=exp.DataType.build("VARCHAR"))
    base = target.rstrip("[]")
    if base in _PG_TYPE_ALIASES:
        return exp.Cast(this=inner, to=exp.DataType.build(_PG_TYPE_ALIASES[base] + ("[]" if target.endswith("[]") else "")))
    return node


_PG_TYPE_ALIASES = {"int2": "SMALLINT", "int4": "INTEGER", "int8": "BIGINT", "float4": "FLOAT", "float8": "DOUBLE",
                    "bool": "BOOLEAN", "int2vector": "SMALLINT[]", "oidvector": "BIGINT[]", "regrole": "VARCHAR",
                    "bpchar": "VARCHAR", "character varying": "VARCHAR"}


def _output_types(tree: exp.Expression) -> list[int | None]:
    """PostgreSQL type of each output column, where the catalog knows it better than DuckDB."""
    select = tree if isinstance(tree, exp.Select) else tree.find(exp.Select)
    if select is None:
        return []
    sources = _sources(select)
    out = []
    for item in select.expressions:
        if _is_star(item):  # `*`: every source's columns; `rl.*`: that source's
            prefix = item.table.lower() if isinstance(item, exp.Column) else ""
            for src in ([sources[prefix]] if prefix in sources else [] if prefix else sources.values()):
                if isinstance(src, exp.Select):
                    sub = _sources(src)
                    out.extend(_type_of(i.unalias() if isinstance(i, exp.Alias) else i, sub, src) for i in src.expressions)
                else:
                    out.extend(oid for _, oid in TABLES.get(src, []))
            continue
        out.append(_type_of(item.unalias() if isinstance(item, exp.Alias) else item, sources, select))
    return out


def _sources(select: exp.Select) -> dict[str, Any]:
    """alias -> catalog table name (original names) or the SELECT of a derived table,
    through parenthesized joins too."""
    out: dict[str, Any] = {}

    def add(node: exp.Expression | None) -> None:
        if node is None:
            return
        if isinstance(node, (exp.From, exp.Join)):
            add(node.this)
            return
        if isinstance(node, exp.Table):
            name, db = node.name.lower(), node.db.lower()
            table = f"is_{name}" if db == "information_schema" else name
            if table in TABLES:
                out[(node.alias or node.name).lower()] = table
            for j in node.args.get("joins") or []:
                add(j)
        elif isinstance(node, exp.Subquery):
            if node.alias and isinstance(node.this, exp.Select):
                out[node.alias.lower()] = node.this
            elif not node.alias:
                add(node.this)
            for j in node.args.get("joins") or []:
                add(j)

    add(select.args.get("from_"))
    for j in select.args.get("joins") or []:
        add(j)
    for cte in select.root().find_all(exp.CTE):  # a CTE read by name is typed as its query
        name = cte.alias_or_name.lower()
        if isinstance(cte.this, exp.Select) and name not in out and any(
                isinstance(t, exp.Table) and t.name.lower() == name and not t.db for t in select.find_all(exp.Table)):
            for t in select.find_all(exp.Table):
                if t.name.lower() == name and not t.db:
                    out[(t.alias or t.name).lower()] = cte.this
    return out


def _type_of(node: exp.Expression, sources: dict[str, str], select: exp.Select) -> int | None:
    if isinstance(node, exp.Column):
        name = node.name.lower()
        tables = [sources[node.table.lower()]] if node.table and node.table.lower() in sources else list(sources.values())
        for t in tables:
            if isinstance(t, exp.Select):
                inner = _sources(t)
                for item in t.expressions:
                    if _is_star(item):  # `s.*` or `*`: the column of that name in the derived table's sources
                        prefix = item.table.lower() if isinstance(item, exp.Column) else ""
                        found = _type_of(exp.column(name, table=prefix or None), inner, t)
                        if found is not None:
                            return found
                    elif _pg_name(item).lower() == name:
                        return _type_of(item.unalias() if isinstance(item, exp.Alias) else item, inner, t)
                continue
            for col, oid in TABLES.get(t, []):
                if col == name:
                    return oid
        return None
    if isinstance(node, exp.Paren):
        return _type_of(node.this, sources, select)
    if isinstance(node, exp.Nullif):
        return _type_of(node.this, sources, select)
    if isinstance(node, exp.Coalesce):
        for arg in [node.this, *node.expressions]:
            t = _type_of(arg, sources, select)
            if t is not None:
                return t
        return None
    if isinstance(node, exp.Case):  # a quoted literal takes the type of the other branches ('a' or typtype: "char")
        results = [b.args["true"] for b in node.args.get("ifs") or []] + [node.args.get("default")]
        for branch in sorted((r for r in results if r is not None), key=lambda r: isinstance(r, exp.Literal)):
            t = _type_of(branch, sources, select)
            if t is not None:
                return t
        return None
    if isinstance(node, exp.Boolean):
        return c.BOOL
    if isinstance(node, exp.Cast):
        target = node.to.sql(dialect="postgres").lower().replace("pg_catalog.", "").strip('"') \
            if isinstance(node.to, exp.DataType) else ""
        return {"text": c.TEXT, "varchar": c.VARCHAR, "bigint": c.INT8, "int": c.INT4, "integer": c.INT4,
                "smallint": c.INT2, "boolean": c.BOOL, "regclass": c.REGCLASS, "regtype": c.REGTYPE,
                "regproc": c.REGPROC, "oid": c.OID, "name": c.NAME, "char": c.CHAR, "regnamespace": c.REGNAMESPACE
                }.get(target)
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Expression):
        return _type_of(node.expression, sources, select)
    if isinstance(node, exp.ArrayAgg) or (isinstance(node, exp.Anonymous) and node.name.lower() == "array_agg"
                                          and node.expressions):  # pg_catalog.array_agg(...) parses as a name
        arg = node.this if isinstance(node, exp.ArrayAgg) else node.expressions[0]
        inner = _type_of(arg.this if isinstance(arg, exp.Order) else arg, sources, select)
        return _ARRAY_TYPES.get(inner) if inner is not None else None
    if isinstance(node, exp.Array) and len(node.expressions) == 1 and isinstance(node.expressions[0], (exp.Select, exp.Subquery)):
        sub = node.expressions[0].this if isinstance(node.expressions[0], exp.Subquery) else node.expressions[0]
        if isinstance(sub, exp.Select) and sub.expressions:
            inner = _type_of(sub.expressions[0].unalias(), _sources(sub), sub)
            return _ARRAY_TYPES.get(inner) if inner is not None else None
    if isinstance(node, (exp.Predicate, exp.Not, exp.And, exp.Or)):
        return c.BOOL
    if isinstance(node, (exp.Explode, exp.Unnest)) or (isinstance(node, exp.Anonymous) and node.name.lower() == "unnest"):
        args = node.expressions if isinstance(node, (exp.Anonymous, exp.Unnest)) else [node.this]
        inner = _type_of(args[0], sources, select) if len(args) == 1 else None
        return _ELEMENT_TYPES.get(inner) if inner is not None else None
    if isinstance(node, exp.Anonymous) and str(node.name).lower().startswith("pgc_"):
        return FUNCTION_TYPES.get(str(node.name).lower()[4:])
    if isinstance(node, exp.Func):
        return FUNCTION_TYPES.get(_func_name(node))
    if isinstance(node, exp.Literal):
        return c.TEXT if node.is_string else (c.INT4 if node.is_int else c.NUMERIC)
    if isinstance(node, exp.Subquery):
        inner = node.this if isinstance(node.this, exp.Select) else None
        if inner is not None and inner.expressions:
            return _type_of(inner.expressions[0].unalias(), _sources(inner), inner)
    return None


def _table_comment(table) -> str:
    if table.public:
        return "dpsql: public table (rows may be read directly)"
    unit = "each row" if table.row_unit else table.privacy_unit
    return (f"dpsql: private table; privacy unit {unit}; a unit counts in at most {table.max_groups} group(s) "
            f"with at most {table.max_rows} row(s) each per query; aggregates only")


def _column_comment(table, col: str) -> str | None:
    p = table.columns.get(col)
    if p is None:
        return None
    parts = []
    if p.bounded:
        parts.append(f"bounds [{p.lower:g}, {p.upper:g}]")
    if p.keys is not None:
        parts.append("keys " + ", ".join(map(str, p.keys)))
    if p.keys_from is not None:
        parts.append(f"keys from {p.keys_from[0]}.{p.keys_from[1]}")
    return "dpsql: " + "; ".join(parts) if parts else None
