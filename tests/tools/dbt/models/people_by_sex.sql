select sex, count(*) as n from {{ source('clinic', 'people') }} group by sex
