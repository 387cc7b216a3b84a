-- The decimals the asset $1 allows. No row: no asset has the code.
SELECT scale FROM assets WHERE code = $1
