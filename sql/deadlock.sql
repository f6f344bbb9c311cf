-- Row locks wait through PostgreSQL's lock manager, so its deadlock
-- detector breaks a cycle between two sessions: one of them fails, the
-- other commits, whichever the detector picks.
CREATE TABLE dl (id int PRIMARY KEY, v int) USING pasv;
INSERT INTO dl VALUES (1, 0), (2, 0);
SET deadlock_timeout = '100ms';
BEGIN;
UPDATE dl SET v = 1 WHERE id = 1;
-- The other session locks row 2, then waits for row 1.
\! "$PASV_PG_BIN/psql" -X -q -d "$PASV_TEST_DB" -c "SET application_name = 'pasv_bg'" -c "SET deadlock_timeout = '100ms'" -c "BEGIN" -c "UPDATE dl SET v = 2 WHERE id = 2" -c "UPDATE dl SET v = 2 WHERE id = 1" -c "COMMIT" > /dev/null 2>&1 &
DO $$ BEGIN
    FOR i IN 1..1000 LOOP
        EXIT WHEN EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_bg' AND wait_event_type = 'Lock');
        PERFORM pg_sleep(0.01);
        PERFORM pg_stat_clear_snapshot();
    END LOOP;
END $$;
-- Now this session waits for row 2: a cycle.
DO $$ BEGIN
    UPDATE dl SET v = 1 WHERE id = 2;
EXCEPTION WHEN deadlock_detected THEN
    NULL; -- this side was chosen; its update of row 2 is undone
END $$;
COMMIT;
DO $$ BEGIN
    FOR i IN 1..1000 LOOP
        EXIT WHEN NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE application_name = 'pasv_bg');
        PERFORM pg_sleep(0.01);
        PERFORM pg_stat_clear_snapshot();
    END LOOP;
END $$;
-- Exactly one side's writes to each row survive: (1,1) if the other
-- session was chosen, else its (2,2) after this one committed row 1 = 1
-- and the other then updated row 1 again.
SELECT ((SELECT v FROM dl WHERE id = 1), (SELECT v FROM dl WHERE id = 2)) IN ((1, 1), (2, 2)) AS one_winner;
DROP TABLE dl;
