/* vectors.h: made by make_vectors.py (keys: openssl genpkey; signatures:
 * openssl dgst and pkeyutl).  The JWK set is jwks.json. */
static const char jwt_rs256[] =
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6InJzYTEifQ.eyJzdWIiOiJhbGljZ"
    "SIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sI"
    "mV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiO"
    "jcsImdyb3VwcyI6WyJhIiwiYiJdfQ.hznJkfB45bNRK_dsHLtXruKopViuk1dsMBxYRn9ILj"
    "B2GeJY7SbTHvpOmd5sGOCArEhyTX2Jx-lIn4MhGxBVoWyH88QaHHFpAPx_ix7tKN1NGzDKxy"
    "iraTRh-OZZ806qMU0SUAO4olXZgClWmRVUKw26wmFqAzsNYjNkH0bidXro98T1E3ISfMepHR"
    "nURFD_DcC-PwL4PX2FNjvpxhjWWEdf4l51BPkj0JL29fTNCZIWX6hfoN9Nocj5MQUhAmdmwy"
    "g1_N-HjkrvGa2ilcXfG2aVCBd-Z0tcIDpiADnh0mp2NiorPg92EMhzO8Eyn1z0-yHtIwvzJs"
    "3ByuLqLmy8SA"
;
static const char jwt_ps256[] =
    "eyJhbGciOiJQUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6InJzYTEifQ.eyJzdWIiOiJhbGljZ"
    "SIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sI"
    "mV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiO"
    "jcsImdyb3VwcyI6WyJhIiwiYiJdfQ.mvo3kzjUmD53W91tG6dmJfvZdDw6ilGcujfARHpViZ"
    "rvz01pmrHvu3h3M7sTMoF7Hm2SDo7a4MqrlkTvM89u1zKaZkfCRWn5_w67ggW26n7lHF7xnO"
    "xjk4D9cNgpKkcFa-d8pZF0KJrgwToNJW5g73o485w2tSSJKBaJJtzrFWALNQ2JPlomUMoXmL"
    "5ua_OOzWIL-kc_eior2CdNmpI22tlpz6Y9Vhm10wZfc44pHwYOOY0r-nMrqcq_I5J3SECSrn"
    "SY360zTDjMTi_RUfbiffQrW-w3cu-gNlXtA0P1nol_V8svr91XUaQX4P6EEyUmddGT4kysqv"
    "46DUAk_EUD0Q"
;
static const char jwt_es256[] =
    "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImVjMjU2In0.eyJzdWIiOiJhbGlj"
    "ZSIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0s"
    "ImV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwi"
    "OjcsImdyb3VwcyI6WyJhIiwiYiJdfQ.6-KjHVi4kS8LBzAliZMBCf2DJEvjqxVFdjJoZObqz"
    "R2ONu2rzKkkrnIZBj7ZWVBbspeS2mlLigincuUkWW5fdw"
;
static const char jwt_es384[] =
    "eyJhbGciOiJFUzM4NCIsInR5cCI6IkpXVCIsImtpZCI6ImVjMzg0In0.eyJzdWIiOiJhbGlj"
    "ZSIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0s"
    "ImV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwi"
    "OjcsImdyb3VwcyI6WyJhIiwiYiJdfQ.X1AOYNx4UI-ctZfHSMo9gKCrekgipEhhf768f4TWs"
    "9VlnVn9hQ-GenNHV2tZKIEVCkNtc951_k2XO3NW-uliaXGzVJKe8atpG6_Eq4x0NbJpgk55j"
    "5DM8QQl1gulQNOr"
;
static const char jwt_eddsa[] =
    "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0dHB"
    "zOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sImV4cCI6NDAwMDAwMDA"
    "wMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiOjcsImdyb3VwcyI6WyJ"
    "hIiwiYiJdfQ.1RZNDJFeYiRqMWM64TjUvOJ0MupCJZar1PDmNylndqBm5IK7-q7ogG2p2wqm"
    "ZtUvJjEjL2YXtS_TlmH76PSzAg"
;
static const char jwt_hs256[] =
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImhzIn0.eyJzdWIiOiJhbGljZSIs"
    "ImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sImV4"
    "cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiOjcs"
    "Imdyb3VwcyI6WyJhIiwiYiJdfQ.gHXisQEBg0HfOHYyBvTy_KbQ2ns4ynxacoUFnTHDLNU"
;
static const char jwt_expired[] =
    "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0dHB"
    "zOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sImV4cCI6MTAwMDAwMDE"
    "wMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiOjcsImdyb3VwcyI6WyJ"
    "hIiwiYiJdfQ.ZR1sms71oTcM0gEqFf-xDhTOr7XZdDT9ZnrffpmGCe-VrJ8knViZg4RyRnXL"
    "sRK2PXLfrpQ_lOhAxA3jilE86g"
;
static const char jwt_not_yet[] =
    "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0dHB"
    "zOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sImV4cCI6NDAwMDAwMDA"
    "wMCwibmJmIjo0MDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiOjcsImdyb3VwcyI6WyJ"
    "hIiwiYiJdfQ.cFAjBO5BXO2zJQqAl8nP3C5pf3qYj6ikMS9ZduBw6Ptj98JDnj-TBrVY0oFu"
    "k8JQSw56hUTzpE_ybRaU2s364g"
;
static const char jwt_no_times[] =
    "eyJhbGciOiJFUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJib2IifQ.wn4fwruiYKwrePOA"
    "r69WnqI0ohEgRAuCo4TTryVxMT2t0BGb_qi0iXjJbTsJb8snoW1Tu443IYPq6L3LP4Z6zw"
;
static const char jwt_wrong_kid[] =
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6Im5vcGUifQ.eyJzdWIiOiJhbGljZ"
    "SIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sI"
    "mV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiO"
    "jcsImdyb3VwcyI6WyJhIiwiYiJdfQ.TrN8aiKQflQpckVP2_WfvBGUDN9tmsbsrMahwvnoov"
    "auznh5lGlsuR4mKZcu-oVUReqQnxsmBlQcnV8FhxUTwBAhXyHbjRluMGmgvjAhyfTXDUfhcS"
    "M7ohNFmyFvaLsdfB7M8j72s2-rSE-MeFPJ2SNZNWVf2FwaE--beU4vY6mafdmdTa6r_SdV5C"
    "P6uWgBRO7lZ0Kj8hbPKRqzey0mhgiqlTyoSbVWVCin3RHFvv7gAKl9CTWDrkd8NJIRinJDc_"
    "jI1uduB39qT2TGKIJjM4e0GqTiS07VxzOB-KRa9S1e6mD1bIdlS51fCyZ9IgRDxxhQYCOjlD"
    "yG4GOu0KViEA"
;
static const char jwt_enc_key[] =
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6ImVuYyJ9.eyJzdWIiOiJhbGljZSI"
    "sImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sImV"
    "4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiOjc"
    "sImdyb3VwcyI6WyJhIiwiYiJdfQ.VcreIiva4_CwVkYnWlJl2r2jYWTV5bWE2BYyUFN2AMj1"
    "0ddQZ4tnNb_R2BLvdqg4AOFB7gPsf-25sxuafYHtTXwPU9XKjBFYVYcSgjRkH3-UEmrGE2Bb"
    "XCDqOE1t_oPDtNTV4cBC7rcLeH6U4hnnWtJ9wPOKcEzrgOhr3j4cxC8kn7VTj57PjiyDMZ0Z"
    "_mUA8CtnCM6mNqcTGbGJJTUDHaAq722CYZxUv4N6iMOUgQHZTu8zH-HZEkBv3td3P67RKo9z"
    "fophXX-rgkyKWy6dP5Y5tetnxJKf7ALvQkHsGw6Vf1Amt2OeS9GcWQHEuX_8iFtAWx6c-fZV"
    "bfUe4eH65w"
;
static const char jwt_confused[] =
    "eyJhbGciOiJIUzI1NiIsImtpZCI6InJzYTEifQ.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0d"
    "HBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sImV4cCI6NDAwMDAwM"
    "DAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiOjcsImdyb3VwcyI6W"
    "yJhIiwiYiJdfQ.AERYfG6fPkxs4lQlsxk3jrYRSlezyibz-FXb8s14X14"
;
static const char jwt_alg_none[] =
    "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4"
    "YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sImV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAw"
    "MDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiOjcsImdyb3VwcyI6WyJhIiwiYiJdfQ."
;
static const char jwt_alg_none_signed[] =
    "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4"
    "YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sImV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAw"
    "MDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiOjcsImdyb3VwcyI6WyJhIiwiYiJdfQ.AAAA"
;
static const char jwt_bad_sig[] =
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6InJzYTEifQ.eyJzdWIiOiJhbGljZ"
    "SIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sI"
    "mV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiO"
    "jcsImdyb3VwcyI6WyJhIiwiYiJdfQ.hznJkfB45bNRK_dsHLtXruKopViuk1dsMBxYRn9ILj"
    "B2GeJY7SbTHvpOmd5sGOCArEhyTX2Jx-lIn4MhGxBVoWyH88QaHHFpAPx_ix7tKN1NGzDKxy"
    "iraTRh-OZZ806qMU0SUAO4olXZgClWmRVUKw26wmFqAzsNYjNkH0bidXro98T1E3ISfMepHR"
    "nURFD_DcC-PwL4PX2FNjvpxhjWWEdf4l51BPkj0JL29fTNCZIWX6hfoN9Nocj5MQUhAmdmwy"
    "g1_N-HjkrvGa2ilcXfG2aVCBd-Z0tcIDpiADnh0mp2NiorPg92EMhzO8Eyn1z0-yHtIwvzJs"
    "3ByuLqAAAAAA"
;
static const char jwt_truncated[] =
    "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCIsImtpZCI6InJzYTEifQ.eyJzdWIiOiJhbGljZ"
    "SIsImlzcyI6Imh0dHBzOi8vaXNzdWVyLmV4YW1wbGUiLCJhdWQiOlsiYXBpIiwid2ViIl0sI"
    "mV4cCI6NDAwMDAwMDAwMCwibmJmIjoxMDAwMDAwMDAwLCJhZG1pbiI6dHJ1ZSwibGV2ZWwiO"
    "jcsImdyb3VwcyI6WyJhIiwiYiJdfQ"
;
static const char jwt_jwks[] =
    "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"vUGDo7zLwr5rt8h9WRgIMrHQrZtOXxA54TX_l-g-2M0iL"
    "5WBS0A1r5vj7aELq92hfoJmZLT8LICnte_kSkneIca6RrwN39lYxlJ5yN_KLw930FuI9TORg"
    "GzjPaispyMZ5wZCOSvcK9Xh2VUYoOZwRrGOUEgmKwyAl6EU8iBUvJQnNhmNkXGhLABwQFIrR"
    "u9P1mXgLzY5iS9jH2hAtLDHSr3HL3AkioScnPK1Z5FkzJpmPrnLsgP94aQpzUqOg6zGo-VWl"
    "HFFKs2KLhEPehraSZiiKsHUkVT7YAa3L3zl6TbnM5qbcruFrDBhCGTsHINCilkZZUVaIVZ58"
    "3xwOyR--w\",\"e\":\"AQAB\",\"kid\":\"rsa1\",\"use\":\"sig\"},{\"kty\":\"EC\",\"crv\":\"P-256"
    "\",\"x\":\"nuGT69igEx9vmkgZ5TDQs_LOIHFRaOp8L1tawScZZ2k\",\"y\":\"f6l_VoP9LR-WBoy"
    "w9V9Qy5dOOlNK5t2LPA8A-ZFfNGY\",\"kid\":\"ec256\"},{\"kty\":\"EC\",\"crv\":\"P-384\",\""
    "x\":\"C-LQmgR3I4ql8PK0R-JmBBMqKMp7it9ivDKwR5qmb7yNvHu5P9xXG-tls7oV_2CP\",\"y"
    "\":\"L6XZfjwivVj3a47aiDhnyTM9nLFXTkeL7Otlv1qHoHeqmxMU4nhOIv-ws_jHkogO\",\"ki"
    "d\":\"ec384\"},{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"bZ11uLNcMpZvnUr3u5EbWVimdJ"
    "yX0RdOVOSrk1p6IuI\",\"kid\":\"ed\"},{\"kty\":\"oct\",\"k\":\"AAECAwQFBgcICQoLDA0ODxA"
    "REhMUFRYXGBkaGxwdHh8\",\"kid\":\"hs\",\"alg\":\"HS256\"},{\"kty\":\"RSA\",\"n\":\"tKNNq5"
    "e9Wu_JYCghRZ39K3peMOF-tK5wOgz5e_ORn1mubWq_qlH38GhJzhTMengz-jra-5Gv8iRC2C"
    "hNu5cQYx6Nu2wZf0J8qBmXU6jiVvFBP-UhkoAaEnf8cUUEO1rWC63Yo7rqo0lQaiwRFRomzN"
    "yAdQuhJU8byugqMGAhlRyZ93NufFH9N3UjkMDFf8mNAepiQ7cDpcON7WsTXeXgE_ordDsBHh"
    "qkDr_kNQg6L1ABXNvmq3Xa-mbjPfRDGQB9TJnrwl0KBtAMkWrk6rlGlNm63Cw7piV1WHGF7P"
    "rr1ltTTX-EGsEgkJB2VxfAhL5Y8pZlkjsJLoDmrPFKE_-pkw\",\"e\":\"AQAB\",\"kid\":\"enc\""
    ",\"use\":\"enc\"}]}"
;
